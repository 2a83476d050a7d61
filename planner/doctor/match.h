// Matching a skeleton against a checkpoint: what would stay on meta, what is extra, what
// differs, how tied groups and non-persistent buffers will be resolved. The model behind
// `register`'s refusal, the plan's "would stay on meta" errors and the meta doctor
// (`metactl check`, rendered by planner/doctor/check_report.h).
//
//   MatchReport report = MatchSkeleton(skeleton, checkpoint);        // names, shapes, dtypes
//   MatchReport names_only = MatchSkeletonNames(skeleton, index);   // weights not downloaded
//   MatchReport partial = MatchSkeletonPartialDownload(skeleton, index, absent);  // some shards
//   if (report.WouldStayMeta()) { ... report.WouldStayMetaNames() ... }
//
// Only facts live here (which names, which shapes); the words users read, and the fixes,
// are in check_report.h, except the one-line findings MatchToStatus shares with it.
#ifndef METALOAD_PLANNER_DOCTOR_MATCH_H_
#define METALOAD_PLANNER_DOCTOR_MATCH_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "planner/doctor/missing_groups.h"
#include "planner/format/checkpoint.h"
#include "planner/format/quantization.h"
#include "planner/skeleton/skeleton.h"

namespace metaload {

struct TensorMismatch {
  std::string name;
  std::vector<int64_t> skeleton_shape;
  std::vector<int64_t> checkpoint_shape;
  DType skeleton_dtype = DType::kF32;
  DType checkpoint_dtype = DType::kF32;
  // The checkpoint name compared when it is a tied alias of `name` ("" otherwise).
  std::string stored_as;
};

// Where a tied group's one storage comes from.
enum class TiedSource {
  kFirstName,  // stored under the group's first name: the usual case
  kAliasOnly,  // only an alias is stored (e.g. only lm_head.weight): read from the alias
  kBoth,       // the first name and an alias are stored: the first is used, the alias ignored
  kNone,       // no name of the group is stored: the first name is in `missing`
};

struct TiedGroupMatch {
  std::vector<std::string> names;  // the skeleton's group; names[0] is the name it stores
  TiedSource source = TiedSource::kFirstName;
  std::string read_from;  // the checkpoint name the storage is read from; "" for kNone
  // kBoth: the aliases the checkpoint also holds, whose bytes are not read.
  std::vector<std::string> ignored_aliases;
};

// Kinds of checkpoint tensors that a skeleton does not name, told apart by their names.
enum class ExtraKind {
  kBitsandbytes8bit,  // "<module>.SCB", "<module>.weight_format"
  kBitsandbytes4bit,  // "<weight>.absmax", ".quant_map", ".quant_state.*", ".nested_*"
  kPackedQuantized,   // GPTQ/AWQ: "<module>.qweight", ".qzeros", ".scales", ".g_idx"
  kFp8Scales,         // "<module>.weight_scale", ".weight_scale_inv", ".input_scale"
  kRotaryInvFreq,     // "...rotary_emb.inv_freq", persisted by older transformers versions
  kStaleBuffer,       // other buffers older versions persisted: GPT-2's attn.bias and
                      // attn.masked_bias, BERT's embeddings.position_ids
  kOther,             // nothing recognisable: another model's tensor, or a renamed one
};
ExtraKind ClassifyExtra(absl::string_view name);
// bitsandbytes, GPTQ/AWQ or FP8 state: the weights beside it are not plain values.
bool IsQuantizationState(ExtraKind kind);
// A stable identifier for JSON: "bitsandbytes-8bit", ..., "other".
absl::string_view ExtraKindId(ExtraKind kind);

struct ExtraGroup {
  ExtraKind kind = ExtraKind::kOther;
  std::vector<std::string> names;  // checkpoint order
};

struct NonPersistentBuffer {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  std::string init;          // the skeleton's rule; "" when it gives none
  bool also_stored = false;  // the checkpoint holds it too (an older version saved it): ignored
};

// When most names differ only by a leading prefix ("model.", "module.", "base_model.model.").
struct PrefixHint {
  std::string prefix;
  bool checkpoint_has_it = false;  // true: checkpoint names carry it; false: they lack it
  size_t matched = 0;              // how many names match once the prefix is accounted for
};

// When the checkpoint holds more numbered blocks under one name than the skeleton does
// ("model.layers.3.…" against a skeleton of 2 layers): another size of the same model.
struct LayerCountHint {
  std::string prefix;            // "model.layers"
  int64_t checkpoint_count = 0;  // highest index + 1 among the checkpoint's names
  int64_t skeleton_count = 0;    // highest index + 1 among the skeleton's
};

// A shard that a checkpoint's index names but its folder lacks, while other shards are there:
// a download that stopped half way. Nothing loads such a checkpoint.
struct AbsentShard {
  std::string file;                  // as the index names it
  std::vector<std::string> tensors;  // every tensor the index maps to it, by name
};

// What the checkpoint's quantization means for this skeleton (planner/doctor/quantized_match.h
// fills it): set when the checkpoint's config.json declares a quantization_config, or when it
// stores FP8/U8 codes with scale tensors beside them and declares none.
struct QuantizationMatch {
  std::string config_path;  // the config.json read; "" when the checkpoint's folder has none
  // Absent: codes with scales are stored and no quantization_config says how to read them.
  std::optional<Quantization> declared;
  bool dequantize = false;  // judged as a dequantizing load (--dequantize) would judge it
  size_t value_count = 0;   // values stored as codes and scales (FindQuantized), 0 names-only
  // Every such value's name (as a module holds it) -> its rule (QuantizedValue::Rule), and the
  // stored name of its codes -> the value's name: what the report says of a tensor stored quantized.
  std::map<std::string, std::string> value_rules;
  std::map<std::string, std::string> value_of_codes;
  // Skeleton tensors a dequantizing load fills from codes and scales, each with its rule
  // (QuantizedValue::Rule) and the dtype it is held in. Skeleton order.
  struct Dequantized {
    std::string tensor;
    DType held = DType::kBF16;
    std::string rule;
  };
  std::vector<Dequantized> dequantized;
  // Skeleton tensors that hold the codes as stored (a module built quantized): loaded as they are.
  size_t kept_as_stored = 0;
  // Stored tensors a dequantizing load refuses (FindQuantized's problems: no scale, a scale of the
  // wrong shape), name -> why. Filled under `dequantize` only; each makes the check fail.
  std::vector<std::pair<std::string, std::string>> problems;
  // The method is declared and metaload does not read it (bitsandbytes, GPTQ, AWQ...): refused,
  // whatever the flags.
  bool Refused() const { return declared.has_value() && !declared->scheme.has_value(); }
};

struct MatchReport {
  // False when only the checkpoint's index was read: names were compared, shapes and
  // dtypes were not, and `names_only_reason` says why ("only the index is present").
  bool shapes_checked = true;
  std::string names_only_reason;
  size_t skeleton_tensor_count = 0;    // persistent skeleton tensors: what a checkpoint must hold
  size_t checkpoint_tensor_count = 0;  // names the checkpoint holds

  // Persistent skeleton tensors the checkpoint lacks, under their name and every tied alias:
  // they would stay on meta. Skeleton order.
  std::vector<std::string> missing;
  // `missing` grouped (missing_groups.h): runs of whole layers and tying mismatches only, each
  // listing its tensors; a tensor of an absent shard is never grouped (its shard explains it).
  // Every missing tensor in no group is a finding of its own.
  std::vector<MissingGroup> missing_groups;
  // Checkpoint tensors the skeleton does not name, tied aliases excepted (not fatal: they are
  // not loaded). Checkpoint order; `extras` groups the same names by kind (enum order).
  std::vector<std::string> unexpected;
  std::vector<ExtraGroup> extras;
  // Same name, different shape: cannot be loaded, so would stay on meta. Skeleton order.
  std::vector<TensorMismatch> shape_mismatches;
  // Same name and shape, different dtype: converted on load. Skeleton order.
  std::vector<TensorMismatch> dtype_mismatches;
  // Of those, the conversions no load makes (planner/format/dtype_conversion.h: FP8 or integer
  // codes read as other values), each with why: `metactl check` fails on them, and loads into a
  // module of that dtype are refused. Skeleton order.
  std::vector<std::pair<TensorMismatch, std::string>> refused_conversions;
  std::vector<TiedGroupMatch> tied;                 // skeleton order of the groups
  std::vector<NonPersistentBuffer> non_persistent;  // skeleton order
  // More than half of the checkpoint's names are unrecognised extras and more than half of
  // the skeleton's are missing: the checkpoint is of another architecture (or naming).
  bool different_architecture = false;
  std::optional<PrefixHint> prefix_hint;
  // Set when unexplained extras sit in blocks numbered past the skeleton's last.
  std::optional<LayerCountHint> layer_hint;
  // Set by MatchSkeletonPartialDownload only: the shards the folder lacks (file order), and
  // how many the index names. Their tensors are not stored: those the skeleton needs are in
  // `missing`.
  std::vector<AbsentShard> absent_shards;
  size_t index_shard_count = 0;
  // Set when the checkpoint is quantized (MatchQuantization, planner/doctor/quantized_match.h).
  std::optional<QuantizationMatch> quantization;

  // Something would stay on meta: a tensor is missing or of another shape, or the checkpoint
  // lacks a shard (then it cannot be opened at all, whatever the skeleton needs of it).
  bool WouldStayMeta() const {
    return !missing.empty() || !shape_mismatches.empty() || !absent_shards.empty();
  }
  // Every tensor that would stay on meta (missing, then shape mismatches, each in skeleton
  // order): what an init policy (`--init-missing`) must cover before a load may proceed.
  std::vector<std::string> WouldStayMetaNames() const;
  // Extras of kind kOther: the ones no known cause explains.
  size_t unexplained_extra_count() const;
};

// A full checkpoint: names, shapes and dtypes. Tied groups are resolved as loading resolves
// them: a group's first name, else an alias the checkpoint holds.
MatchReport MatchSkeleton(const Skeleton& skeleton, const Checkpoint& checkpoint);

// An index without its weights: names only (shapes_checked = false). `names_only_reason`
// defaults to "only the index is present".
MatchReport MatchSkeletonNames(const Skeleton& skeleton, const CheckpointIndex& index,
                               absl::string_view names_only_reason = "");

// An index some of whose shards are in the folder and some not (an interrupted download):
// names only, as MatchSkeletonNames, except that the tensors of the `absent` shards are not
// stored, so a skeleton tensor among them is `missing`; `absent_shards` lists each such shard
// with the tensors it holds. `absent` names shards of `index.weight_map`; others are ignored.
MatchReport MatchSkeletonPartialDownload(const Skeleton& skeleton, const CheckpointIndex& index,
                                         const std::set<std::string>& absent);

// Fills report->missing_groups from report->missing, report->shape_mismatches and
// report->absent_shards (MatchSkeleton* do; a report collected by hand calls it). `skeleton` is
// the one matched.
void GroupMissingTensors(const Skeleton& skeleton, MatchReport* report);

// The absent shard that holds `tensor` or, for the first name of a tied group, one of its
// aliases; nullptr when none does.
const AbsentShard* AbsentShardHolding(const MatchReport& report, absl::string_view tensor);

// One line per tensor that would stay on meta, in WouldStayMetaNames() order (ungrouped), e.g.
// "lm_head.weight is in the skeleton but not in the checkpoint", "x is in shard F, which is
// not in the checkpoint's folder" or "x has shape [2, 3] in the
// skeleton but [3, 2] in the checkpoint". The words `register`, `plan` and `check` share.
std::vector<std::string> WouldStayMetaFindings(const MatchReport& report);

// WouldStayMetaFindings with each group of `missing_groups` as one line, first, in place of its
// tensors' lines: the words `register`, `plan` and `check`'s text share.
std::vector<std::string> GroupedWouldStayMetaFindings(const MatchReport& report);

// OK unless WouldStayMeta(); then RefusedModelError (exit 2) giving each group's line and naming every
// other such tensor (the first 20 findings, then a count) and the fix, e.g. "model llama: 2
// tensors would stay on meta: lm_head.weight is in the skeleton but not in the checkpoint; ...;
// fix: ...".
absl::Status MatchToStatus(const MatchReport& report, const std::string& model_name);

}  // namespace metaload

#endif  // METALOAD_PLANNER_DOCTOR_MATCH_H_
