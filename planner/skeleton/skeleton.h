// A model's skeleton: every tensor (shape and dtype, no data), the module structure,
// the modules that must not be split across devices, and the tied groups.
// The JSON form ("model.json") is documented in docs/skeleton-format.md.
//
//   ML_ASSIGN_OR_RETURN(Skeleton s, ParseSkeletonJson(text, "model.json"));
//   std::string json = SkeletonToJson(s);   // stable: same skeleton -> same bytes
#ifndef METALOAD_PLANNER_SKELETON_SKELETON_H_
#define METALOAD_PLANNER_SKELETON_SKELETON_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/format/checkpoint.h"
#include "planner/format/dtype.h"

namespace metaload {

struct SkeletonTensor {
  std::string name;  // full dotted name, "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  bool is_buffer = false;  // false: a parameter
  bool persistent = true;  // false: a buffer no checkpoint holds (rotary inv_freq)
  std::string init;  // how a non-persistent buffer is computed, e.g. "rope_inv_freq(base=10000,dim=128)"

  uint64_t size_bytes() const;
};

struct SkeletonModule {
  std::string path;       // "model.layers.0"; "" is the root
  std::string type;       // "LlamaDecoderLayer"; may be empty
  bool no_split = false;  // must live whole on one device
};

// A tensor-parallel rule from the skeleton file, overriding the built-in ones
// (planner/strategy/strategies/tp_rules.h) for tensors whose name matches `pattern` (`*` matches any run of
// characters, dots included; nothing else is special).
struct TpRule {
  std::string pattern;
  // "column" (dim 0), "row" (dim 1; a 1-dim tensor is replicated), "replicate", or "dim"
  // with `dim` set.
  std::string split;
  int dim = 0;
};

// The attention geometry the `tp` strategy keeps whole heads by (planner/strategy/strategies/tp_rules.h): the
// query heads, the key/value heads they share (grouped-query attention; kv_heads == heads
// without it, 1 for multi-query), and each head's size. All positive; heads % kv_heads == 0.
struct AttentionGeometry {
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;

  bool operator==(const AttentionGeometry& other) const {
    return heads == other.heads && kv_heads == other.kv_heads && head_dim == other.head_dim;
  }
};

// Bound on each field of AttentionGeometry when read from a file, as on a config's sizes:
// products of two stay far below 2^63.
inline constexpr int64_t kMaxAttentionField = int64_t{1} << 24;

struct Skeleton {
  std::string model;         // a name for messages; may be empty
  std::string architecture;  // "LlamaForCausalLM" when known
  // Known when built from a config.json (or written into model.json); absent when derived
  // from a checkpoint alone, whose tensors do not say how many heads they hold.
  std::optional<AttentionGeometry> attention;
  // In model order (the order a forward pass touches them). Names are unique.
  std::vector<SkeletonTensor> tensors;
  std::vector<SkeletonModule> modules;
  // Each group: names that share one storage. The first name is the one a checkpoint
  // stores; the others are aliases and are NOT entries of `tensors`.
  std::vector<std::vector<std::string>> tied_groups;
  // In file order; the first rule matching a tensor's name wins.
  std::vector<TpRule> tp_rules;

  uint64_t total_size_bytes() const;
  // nullptr when absent. A linear scan: index the names yourself for many lookups.
  const SkeletonTensor* Find(absl::string_view name) const;
};

// Validates everything (unique names, known dtypes, non-negative dims, sizes that fit in
// 64 bits, tied names exist, modules unique, attention sizes in [1, kMaxAttentionField] with
// heads a multiple of kv_heads); errors are InvalidArgument naming `source_name`, the field
// and the offending tensor.
absl::StatusOr<Skeleton> ParseSkeletonJson(absl::string_view text, absl::string_view source_name);
std::string SkeletonToJson(const Skeleton& skeleton);

// Derives a skeleton from a checkpoint's own tensors: names, shapes, dtypes as stored;
// numbered blocks ("model.layers.N", "transformer.h.N", "encoder.layer.N", "blocks.N")
// become no-split modules. Model order: embeddings first, then numbered blocks by index,
// then everything else by name, heads ("lm_head") last. tied_groups: the ties the files
// record themselves (Checkpoint::saved_ties, from save_model's metadata); no others are visible.
Skeleton DeriveSkeleton(const Checkpoint& checkpoint, absl::string_view model_name);

// The unit a tensor belongs to when placing whole modules: its outermost no-split
// ancestor module, else its parent module ("lm_head.weight" -> "lm_head").
std::string PlacementUnitOf(const Skeleton& skeleton, absl::string_view tensor_name);

// PlacementUnitOf for many names: indexes the no-split modules once (PlacementUnitOf
// alone scans them on every call). Holds copies, so `skeleton` may go away afterwards.
class PlacementUnitIndex {
 public:
  explicit PlacementUnitIndex(const Skeleton& skeleton);
  std::string UnitOf(absl::string_view tensor_name) const;

 private:
  absl::flat_hash_set<std::string> no_split_paths_;
};

// The identifier of the skeleton JSON format this build reads and writes.
inline constexpr absl::string_view kSkeletonFormat = "metaload.skeleton/1";

}  // namespace metaload

#endif  // METALOAD_PLANNER_SKELETON_SKELETON_H_
