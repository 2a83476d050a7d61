// The meta doctor's words: each finding of a MatchReport becomes one JSON object with a
// "message" (and a "fix" where something should be done); the text form prints the same
// objects, so the two formats can never tell different stories.
#include "planner/doctor/check_report.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "planner/doctor/admission.h"
#include "planner/doctor/quantization_report.h"
#include "planner/doctor/report_text.h"
#include "planner/doctor/shape_summary.h"
#include "planner/format/tensor_layout.h"
#include "util/json/json_util.h"

namespace metaload {
namespace {

using report_text::kEmDash;
using report_text::Plural;

using json_util::OrderedJson;

constexpr size_t kMaxListedInText = 20;
constexpr size_t kMaxNamesPerGroupInText = 5;

constexpr char kInitMissingFix[] =
    "initialize it explicitly before use (--init-missing zeros|normal:STD on `metactl register` and `metactl "
    "load`)";
constexpr char kNeverMove[] =
    "never move a placed model afterwards (model.to(...) after placement is what "
    "raises \"Cannot copy out of meta tensor; no data!\")";

// "2 of 3 shards the index names are not in the folder" ("1 of 3 ... is").
std::string AbsentShardCount(const MatchReport& report) {
  return absl::StrCat(report.absent_shards.size(), " of ", report.index_shard_count,
                      " shards the index names ", report.absent_shards.size() == 1 ? "is" : "are",
                      " not in the folder");
}

absl::string_view ParentOf(absl::string_view name) {
  const size_t dot = name.rfind('.');
  return dot == absl::string_view::npos ? absl::string_view() : name.substr(0, dot);
}

// What each kind of unexpected tensor is, in ExtraKind order.
struct ExtraKindWords {
  absl::string_view label;
  absl::string_view why;
};
constexpr ExtraKindWords kExtraKindWords[] = {
    {"bitsandbytes 8-bit quantization state (.SCB, .weight_format)",
     "the checkpoint was saved from a model quantized with bitsandbytes LLM.int8(): its linear weights are "
     "int8, with per-row scales in .SCB"},
    {"bitsandbytes 4-bit quantization state (.absmax, .quant_map, .quant_state)",
     "the checkpoint was saved from a model quantized with bitsandbytes 4-bit (NF4/FP4): its linear weights "
     "are packed into U8, with their scales here"},
    {"GPTQ/AWQ packed weights (.qweight, .qzeros, .scales, .g_idx)",
     "the checkpoint is quantized with GPTQ or AWQ: each linear weight is packed into .qweight, with zero "
     "points and scales beside it"},
    {"FP8 scales (.weight_scale, .weight_scale_inv, .input_scale)",
     "the checkpoint is quantized to FP8: each weight is stored in 8 bits with a scale beside it"},
    {"rotary inv_freq persisted by an older version",
     "older transformers versions saved the rotary embedding's inv_freq; current ones compute it (a "
     "non-persistent buffer): the stored copy is ignored"},
    {"buffers persisted by older versions (attn.bias, attn.masked_bias, position_ids)",
     "older versions saved constant buffers (causal masks, position ids) that current ones build themselves: "
     "the stored copies are ignored"},
    {"not in the skeleton", "the skeleton names no such tensor: it is not loaded"},
};
static_assert(std::size(kExtraKindWords) == static_cast<size_t>(ExtraKind::kOther) + 1,
              "one entry per ExtraKind");

const ExtraKindWords& WordsFor(ExtraKind kind) { return kExtraKindWords[static_cast<size_t>(kind)]; }

std::string QuantizationFix(ExtraKind kind) {
  switch (kind) {
    case ExtraKind::kBitsandbytes8bit:
      return "load it with the quantization it was saved with (transformers: "
             "BitsAndBytesConfig(load_in_8bit=True)), or use the unquantized checkpoint";
    case ExtraKind::kBitsandbytes4bit:
      return "load it with the quantization it was saved with (transformers: "
             "BitsAndBytesConfig(load_in_4bit=True)), or use the unquantized checkpoint";
    default:
      return "load it with the checkpoint's quantization_config (the model class then has quantized "
             "layers), or use the unquantized checkpoint";
  }
}

// Module path -> the quantization whose state the checkpoint holds for that module, so that
// a finding on "x.weight" can say that x is stored quantized.
absl::flat_hash_map<std::string, ExtraKind> QuantizedModules(const MatchReport& report) {
  absl::flat_hash_map<std::string, ExtraKind> modules;
  for (const ExtraGroup& group : report.extras) {
    if (!IsQuantizationState(group.kind)) continue;
    for (const std::string& name : group.names) {
      absl::string_view module = ParentOf(name);
      if (group.kind == ExtraKind::kBitsandbytes4bit) {
        // "x.weight.quant_state.bitsandbytes__nf4" and "x.weight.absmax" belong to module x.
        const size_t state = name.find(".weight.");
        module = state == std::string::npos ? ParentOf(module) : absl::string_view(name).substr(0, state);
      }
      modules.emplace(module, group.kind);
    }
  }
  return modules;
}

bool IsHeadName(absl::string_view name) {
  static const auto* const kHeads = new absl::flat_hash_set<absl::string_view>{
      "score", "classifier", "lm_head", "qa_outputs", "head", "cls", "pooler"};
  for (absl::string_view part : absl::StrSplit(ParentOf(name), '.')) {
    if (kHeads->contains(part)) return true;
  }
  return false;
}

struct Sections {
  std::vector<OrderedJson> would_stay_meta, missing_groups, diagnosis, dtype_mismatches, refused_conversions,
      unexpected, tied, non_persistent, quantization, dequantized, quantization_problems;
};

// Runs of missing layers and tying mismatches (missing_groups.h), each with every tensor it covers.
void AddMissingGroups(const MatchReport& report, Sections* out) {
  for (const MissingGroup& group : report.missing_groups) {
    OrderedJson entry;
    if (group.kind == MissingKind::kLayers) {
      entry["problem"] = "layers";
      entry["container"] = group.container;
      entry["first_layer"] = group.first_layer;
      entry["last_layer"] = group.last_layer;
      entry["layers"] = group.layer_count;
      entry["present_layers"] = group.present_layer_count;
    } else {
      entry["problem"] = "tying_mismatch";
      entry["partner"] = group.partner;
    }
    entry["tensors"] = group.tensors;
    entry["message"] = group.message;
    entry["fix"] = group.fix;
    out->missing_groups.push_back(std::move(entry));
  }
}

// What the text shows of what would stay on meta: each group as one finding, then every tensor
// no group covers.
std::vector<OrderedJson> GroupedWouldStayMeta(const Sections& sections) {
  std::vector<OrderedJson> entries = sections.missing_groups;
  absl::flat_hash_set<std::string> grouped;
  for (const OrderedJson& group : sections.missing_groups) {
    for (const auto& name : group["tensors"]) grouped.insert(name.get<std::string>());
  }
  for (const OrderedJson& entry : sections.would_stay_meta) {
    if (entry["problem"] != "missing" || !grouped.contains(entry["tensor"].get<std::string>())) {
      entries.push_back(entry);
    }
  }
  return entries;
}

void AddWouldStayMeta(const MatchReport& report, const absl::flat_hash_map<std::string, ExtraKind>& quantized,
                      Sections* out) {
  const std::vector<std::string> findings = WouldStayMetaFindings(report);
  const absl::flat_hash_set<absl::string_view> extras(report.unexpected.begin(), report.unexpected.end());
  size_t i = 0;
  for (const std::string& name : report.missing) {
    OrderedJson entry;
    entry["tensor"] = name;
    entry["problem"] = "missing";
    entry["message"] = findings[i++];
    const auto quant = quantized.find(ParentOf(name));
    std::string stored_quantized, stored_quantized_fix;
    if (const AbsentShard* shard = AbsentShardHolding(report, name)) {
      entry["shard"] = shard->file;
      entry["fix"] = absl::StrCat("download ", shard->file, ": the download is incomplete (",
                                  AbsentShardCount(report), ")");
    } else if (DescribeStoredQuantized(report, name, name, &stored_quantized, &stored_quantized_fix)) {
      entry["message"] = absl::StrCat(entry["message"].get<std::string>(), ": it is ", stored_quantized);
      entry["fix"] = stored_quantized_fix;
    } else if (quant != quantized.end()) {
      const std::string packed = absl::StrCat(ParentOf(name), ".qweight");
      entry["message"] =
          absl::StrCat(entry["message"].get<std::string>(),
                       extras.contains(packed) ? absl::StrCat(": it is stored quantized, as ", packed)
                                               : ": it is stored quantized");
      entry["fix"] = QuantizationFix(quant->second);
    } else if (IsHeadName(name)) {
      entry["fix"] = absl::StrCat(
          "a head the checkpoint does not have: use the model class that matches the checkpoint, or ",
          "initialize it explicitly and train it (--init-missing normal:0.02 on `metactl register` and "
          "`metactl load`)");
    } else {
      entry["fix"] = absl::StrCat(
          "load the missing weights (is every shard downloaded? is this the checkpoint of "
          "this model?), or, if it is a new layer, ",
          kInitMissingFix);
    }
    out->would_stay_meta.push_back(std::move(entry));
  }
  for (const TensorMismatch& m : report.shape_mismatches) {
    OrderedJson entry;
    entry["tensor"] = m.name;
    entry["problem"] = "shape";
    entry["skeleton_shape"] = m.skeleton_shape;
    entry["checkpoint_shape"] = m.checkpoint_shape;
    if (!m.stored_as.empty()) entry["stored_as"] = m.stored_as;
    entry["message"] = findings[i++];
    const auto quant = quantized.find(ParentOf(m.name));
    if (quant != quantized.end()) {
      entry["message"] = absl::StrCat(entry["message"].get<std::string>(), ": it is stored quantized");
      entry["fix"] = QuantizationFix(quant->second);
    } else {
      // --init-missing covers absent tensors only: a stored tensor of another shape is not
      // silently replaced.
      entry["fix"] =
          "use the model class and config that match the checkpoint (vocab_size, hidden_size and the head "
          "counts decide these shapes); to change a shape on purpose, load with the checkpoint's shapes and "
          "resize afterwards (e.g. resize_token_embeddings)";
    }
    out->would_stay_meta.push_back(std::move(entry));
  }
}

void AddDiagnosis(const MatchReport& report, Sections* out) {
  if (!report.absent_shards.empty()) {
    OrderedJson entry;
    entry["problem"] = "absent_shards";
    std::vector<std::string> files;
    std::vector<std::string> tensors;
    for (const AbsentShard& shard : report.absent_shards) {
      files.push_back(shard.file);
      tensors.insert(tensors.end(), shard.tensors.begin(), shard.tensors.end());
    }
    entry["shards"] = files;
    entry["tensors"] = tensors;
    entry["message"] = absl::StrCat(
        AbsentShardCount(report), ": ", absl::StrJoin(files, ", "), ", holding ",
        Plural(tensors.size(), "tensor", "tensors"),
        ". The download is incomplete: nothing loads a checkpoint with a shard missing (`metactl inspect`, "
        "`plan` and `register` refuse it)");
    entry["fix"] =
        "download the missing shards (huggingface-cli download resumes an interrupted download), or point to "
        "the folder that holds every shard";
    out->diagnosis.push_back(std::move(entry));
  }
  if (report.prefix_hint.has_value()) {
    const PrefixHint& hint = *report.prefix_hint;
    OrderedJson entry;
    entry["problem"] = "name_prefix";
    entry["prefix"] = hint.prefix;
    entry["checkpoint_has_prefix"] = hint.checkpoint_has_it;
    entry["matched"] = hint.matched;
    if (hint.checkpoint_has_it) {
      entry["message"] = absl::StrCat(hint.matched, " checkpoint names are skeleton names with the prefix \"",
                                      hint.prefix, "\" added: the model was saved from a wrapper");
      entry["fix"] = absl::StrCat(
          "save the unwrapped model (DDP's model.module, torch.compile's model._orig_mod, PEFT's ",
          "merge_and_unload()), or strip \"", hint.prefix, "\" from the checkpoint's names");
    } else {
      entry["message"] = absl::StrCat(hint.matched, " skeleton names are checkpoint names with the prefix \"",
                                      hint.prefix, "\" added: the checkpoint was saved from the base model");
      entry["fix"] =
          absl::StrCat("use the model class that matches the checkpoint (the base model, without \"",
                       hint.prefix, "\"), or add the prefix to the checkpoint's names");
    }
    out->diagnosis.push_back(std::move(entry));
  }
  if (report.different_architecture) {
    OrderedJson entry;
    entry["problem"] = "different_architecture";
    entry["message"] = absl::StrCat(
        "the checkpoint looks like a different architecture: ", report.unexplained_extra_count(), " of ",
        Plural(report.checkpoint_tensor_count, "checkpoint tensor is", "checkpoint tensors are"),
        " not in the skeleton, and ", report.missing.size(), " of ",
        Plural(report.skeleton_tensor_count, "skeleton tensor is", "skeleton tensors are"),
        " not in the checkpoint");
    entry["fix"] =
        "use the model class that matches the checkpoint (its config.json names it under \"architectures\"), "
        "or derive the skeleton from the checkpoint itself: metactl skeleton CHECKPOINT";
    out->diagnosis.push_back(std::move(entry));
  }
}

void AddDtypeMismatches(const MatchReport& report,
                        const absl::flat_hash_map<std::string, ExtraKind>& quantized, Sections* out) {
  for (const TensorMismatch& m : report.dtype_mismatches) {
    OrderedJson entry;
    entry["tensor"] = m.name;
    entry["skeleton_dtype"] = std::string(DTypeCode(m.skeleton_dtype));
    entry["checkpoint_dtype"] = std::string(DTypeCode(m.checkpoint_dtype));
    if (!m.stored_as.empty()) entry["stored_as"] = m.stored_as;
    std::string message = absl::StrCat(m.name, " is ", DTypeCode(m.skeleton_dtype), " in the skeleton but ",
                                       DTypeCode(m.checkpoint_dtype), " in the checkpoint",
                                       m.stored_as.empty() ? "" : absl::StrCat(" (as ", m.stored_as, ")"));
    const auto quant = quantized.find(ParentOf(m.name));
    if (quant != quantized.end()) {
      absl::StrAppend(&message, ": it is stored quantized, and a plain conversion would give wrong values");
      entry["fix"] = QuantizationFix(quant->second);
    } else {
      absl::StrAppend(&message, ": converted on load");
    }
    entry["message"] = std::move(message);
    out->dtype_mismatches.push_back(std::move(entry));
  }
}

void AddRefusedConversions(const MatchReport& report,
                           const absl::flat_hash_map<std::string, ExtraKind>& quantized, Sections* out) {
  for (const auto& [m, why] : report.refused_conversions) {
    OrderedJson entry;
    entry["tensor"] = m.name;
    entry["skeleton_dtype"] = std::string(DTypeCode(m.skeleton_dtype));
    entry["checkpoint_dtype"] = std::string(DTypeCode(m.checkpoint_dtype));
    entry["message"] = absl::StrCat(m.name, " is ", DTypeCode(m.skeleton_dtype), " in the skeleton: ", why);
    const auto quant = quantized.find(ParentOf(m.name));
    std::string stored_quantized, fix;
    if (DescribeStoredQuantized(report, m.name, m.stored_as.empty() ? m.name : m.stored_as, &stored_quantized,
                                &fix)) {
      entry["message"] = absl::StrCat(m.name, " is ", DTypeCode(m.skeleton_dtype), " in the skeleton but ",
                                      stored_quantized);
      entry["fix"] = fix;
    } else if (quant != quantized.end()) {
      entry["fix"] = QuantizationFix(quant->second);
    }
    out->refused_conversions.push_back(std::move(entry));
  }
}

void AddUnexpected(const MatchReport& report, Sections* out) {
  for (const ExtraGroup& group : report.extras) {
    OrderedJson entry;
    entry["kind"] = std::string(ExtraKindId(group.kind));
    entry["label"] = std::string(WordsFor(group.kind).label);
    entry["tensors"] = group.names;
    entry["message"] = std::string(WordsFor(group.kind).why);
    if (group.kind == ExtraKind::kFp8Scales && report.quantization.has_value() &&
        report.quantization->declared.has_value() && report.quantization->declared->scheme.has_value()) {
      entry["fix"] =
          "a dequantizing load consumes them with the weights they scale (--dequantize); a module built with "
          "the checkpoint's quantization_config holds them";
    } else if (IsQuantizationState(group.kind)) {
      entry["fix"] = QuantizationFix(group.kind);
    } else if (group.kind == ExtraKind::kOther && !report.different_architecture) {
      entry["fix"] =
          "nothing, if the model does not need them (a head you replaced, say); otherwise the skeleton is of "
          "another model or version: use the model class that matches the checkpoint";
    }
    out->unexpected.push_back(std::move(entry));
  }
}

void AddTied(const MatchReport& report, Sections* out) {
  static constexpr absl::string_view kResolutionIds[] = {"first", "alias", "both", "none"};
  for (const TiedGroupMatch& group : report.tied) {
    OrderedJson entry;
    entry["names"] = group.names;
    entry["resolution"] = std::string(kResolutionIds[static_cast<int>(group.source)]);
    entry["read_from"] = group.read_from;
    const std::string& first = group.names.front();
    const std::string aliases = absl::StrJoin(group.names.begin() + 1, group.names.end(), ", ");
    const std::string members = absl::StrJoin(group.names, " = ");
    switch (group.source) {
      case TiedSource::kFirstName:
        entry["message"] = absl::StrCat(members, ": stored under the first name, ", first, "; ", aliases,
                                        " share", group.names.size() == 2 ? "s" : "", " its storage");
        break;
      case TiedSource::kAliasOnly:
        entry["message"] =
            absl::StrCat(members, ": only ", group.read_from, " is stored; resolved from the alias: ", first,
                         " is read from it and the group shares one storage");
        break;
      case TiedSource::kBoth:
        entry["message"] = absl::StrCat(members, ": both stored; the first is used (the bytes of ",
                                        absl::StrJoin(group.ignored_aliases, ", "), " are not read)");
        entry["fix"] =
            "nothing, if the model was trained tied; if it was trained untied (tie_word_embeddings false), "
            "the ignored bytes differ and the skeleton should not tie these names";
        break;
      case TiedSource::kNone:
        entry["message"] =
            absl::StrCat(members, ": not stored under any of its names (", first, " would stay on meta)");
        break;
    }
    out->tied.push_back(std::move(entry));
  }
}

void AddNonPersistent(const MatchReport& report, Sections* out) {
  for (const NonPersistentBuffer& buffer : report.non_persistent) {
    OrderedJson entry;
    entry["tensor"] = buffer.name;
    entry["shape"] = buffer.shape;
    entry["dtype"] = std::string(DTypeCode(buffer.dtype));
    entry["init"] = buffer.init;
    entry["also_stored"] = buffer.also_stored;
    std::string message = absl::StrCat(buffer.name, " ", ShapeToString(buffer.shape), " ",
                                       DTypeCode(buffer.dtype), ": never read from a checkpoint; ");
    absl::StrAppend(&message, buffer.init.empty()
                                  ? "the skeleton gives no init rule, so the model must compute it itself"
                                  : absl::StrCat("computed on load by ", buffer.init));
    if (buffer.also_stored)
      absl::StrAppend(&message, " (the checkpoint's copy, from an older version, is ignored)");
    entry["message"] = std::move(message);
    out->non_persistent.push_back(std::move(entry));
  }
}

Sections Explain(const MatchReport& report) {
  const absl::flat_hash_map<std::string, ExtraKind> quantized = QuantizedModules(report);
  Sections sections;
  AddWouldStayMeta(report, quantized, &sections);
  AddMissingGroups(report, &sections);
  AddDiagnosis(report, &sections);
  AddDtypeMismatches(report, quantized, &sections);
  AddRefusedConversions(report, quantized, &sections);
  AddUnexpected(report, &sections);
  AddTied(report, &sections);
  AddNonPersistent(report, &sections);
  sections.quantization = QuantizationEntries(report);
  sections.dequantized = DequantizedEntries(report);
  sections.quantization_problems = QuantizationProblemEntries(report);
  return sections;
}

std::string NamesOnlyNote(const MatchReport& report) {
  return absl::StrCat("shapes and dtypes not checked: ", report.names_only_reason);
}

// "  message\n    fix: ...\n" for each entry, cut after kMaxListedInText; the title counts
// `count` things (the entries, unless they group them). A `summary` comes first, and then the
// entries are cut after kFindingsAfterSummary: the line has said what they share.
void AppendTextSection(absl::string_view title, const std::vector<OrderedJson>& entries, std::string* out,
                       size_t count = 0, const std::optional<std::string>& summary = std::nullopt) {
  if (entries.empty()) return;
  absl::StrAppend(out, "\n", title, " (", count == 0 ? entries.size() : count, "):\n");
  if (summary.has_value()) absl::StrAppend(out, "  summary: ", *summary, "\n");
  const size_t shown = summary.has_value() ? kFindingsAfterSummary : kMaxListedInText;
  for (size_t i = 0; i < entries.size() && i < shown; ++i) {
    const OrderedJson& entry = entries[i];
    if (entry.contains("label")) {
      const std::vector<std::string> names = entry["tensors"].get<std::vector<std::string>>();
      const size_t shown = std::min(names.size(), kMaxNamesPerGroupInText);
      absl::StrAppend(out, "  ", entry["label"].get<std::string>(), ": ",
                      Plural(names.size(), "tensor", "tensors"), ": ",
                      absl::StrJoin(names.begin(), names.begin() + shown, ", "),
                      names.size() > shown ? absl::StrCat(" and ", names.size() - shown, " more") : "", "\n",
                      "    why: ", entry["message"].get<std::string>(), "\n");
    } else {
      absl::StrAppend(out, "  ", entry["message"].get<std::string>(), "\n");
    }
    if (entry.contains("can"))
      absl::StrAppend(out, "    metaload can: ", entry["can"].get<std::string>(), "\n");
    if (entry.contains("fix")) absl::StrAppend(out, "    fix: ", entry["fix"].get<std::string>(), "\n");
  }
  if (entries.size() > shown) {
    absl::StrAppend(out, "  and ", entries.size() - shown, " more (--format json lists all)\n");
  }
}

}  // namespace

bool CheckPasses(const MatchReport& report, bool strict) {
  return !report.WouldStayMeta() && report.refused_conversions.empty() && QuantizationPasses(report) &&
         (!strict || RefusedExtras(report).empty());
}

std::string CheckVerdict(const MatchReport& report, bool strict) {
  // A method metaload does not read is said first: it is the cause of whatever else differs.
  if (report.quantization.has_value() && report.quantization->Refused()) return *QuantizationVerdict(report);
  if (report.WouldStayMeta()) {
    const size_t count = report.missing.size() + report.shape_mismatches.size();
    if (!report.absent_shards.empty() && count == 0) {
      return absl::StrCat("verdict: the checkpoint cannot be loaded: ", AbsentShardCount(report),
                          " (none of the skeleton's tensors is in them; shapes and dtypes not checked)");
    }
    if (!report.absent_shards.empty()) {
      return absl::StrCat("verdict: ", Plural(count, "tensor", "tensors"),
                          " would stay on meta: ", AbsentShardCount(report),
                          " (shapes and dtypes not checked)");
    }
    return absl::StrCat("verdict: ", Plural(count, "tensor", "tensors"), " would stay on meta",
                        report.shapes_checked ? "" : " (shapes and dtypes not checked)");
  }
  if (std::optional<std::string> verdict = QuantizationVerdict(report)) return *std::move(verdict);
  if (!report.refused_conversions.empty()) {
    return absl::StrCat(
        "verdict: refused ", kEmDash, " ", Plural(report.refused_conversions.size(), "tensor", "tensors"),
        " stored as FP8 or integer codes would be read as the skeleton's dtype, which gives other "
        "values (conversions refused, below)");
  }
  if (const std::vector<std::string> refused = RefusedExtras(report); strict && !refused.empty()) {
    return absl::StrCat(
        "verdict: refused ", kEmDash, " ",
        Plural(refused.size(), "unexpected checkpoint tensor", "unexpected checkpoint tensors"), ": ",
        ExtrasCause(report), " (register and load refuse them; --no-strict loads without them)");
  }
  std::vector<std::string> notes;
  if (!report.unexpected.empty()) {
    notes.push_back(absl::StrCat(Plural(report.unexpected.size(), "unexpected tensor", "unexpected tensors"),
                                 " ignored"));
  }
  if (!report.shapes_checked) notes.push_back("shapes and dtypes not checked");
  if (report.quantization.has_value() && !report.quantization->dequantized.empty()) {
    notes.push_back(absl::StrCat(Plural(report.quantization->dequantized.size(), "tensor", "tensors"),
                                 " dequantized on load"));
  }
  return absl::StrCat("verdict: OK ", kEmDash, " nothing would stay on meta",
                      notes.empty() ? "" : absl::StrCat(" (", absl::StrJoin(notes, "; "), ")"));
}

std::string CheckReportToText(const MatchReport& report, const CheckSubject& subject) {
  const Sections sections = Explain(report);
  std::string out = absl::StrCat(
      "check: skeleton ", subject.skeleton,
      subject.model.empty() ? "" : absl::StrCat(" (", subject.model, ")"), ", ",
      Plural(report.skeleton_tensor_count, "tensor", "tensors"), " to load",
      report.non_persistent.empty()
          ? ""
          : absl::StrCat(" + ", Plural(report.non_persistent.size(), "buffer", "buffers"), " computed"),
      "; checkpoint ", subject.checkpoint, ", ", Plural(report.checkpoint_tensor_count, "tensor", "tensors"),
      "\n");
  if (!report.shapes_checked) absl::StrAppend(&out, "note: ", NamesOnlyNote(report), "\n");
  AppendTextSection("quantization", sections.quantization, &out);
  AppendTextSection("would stay on meta", GroupedWouldStayMeta(sections), &out,
                    sections.would_stay_meta.size(), ShapeMismatchSummary(report.shape_mismatches));
  if (!sections.would_stay_meta.empty()) absl::StrAppend(&out, "  whatever fills them, ", kNeverMove, "\n");
  AppendTextSection("diagnosis", sections.diagnosis, &out);
  AppendTextSection("quantization problems (refused by a dequantizing load)", sections.quantization_problems,
                    &out);
  AppendTextSection("conversions refused (codes read as values)", sections.refused_conversions, &out);
  AppendTextSection("dequantized on load (codes and scales to values)", sections.dequantized, &out);
  AppendTextSection("dtype differs (converted on load; not fatal)", sections.dtype_mismatches, &out);
  AppendTextSection(
      subject.strict && !RefusedExtras(report).empty()
          ? "unexpected checkpoint tensors (refused unless --no-strict; older versions' buffers "
            "are ignored)"
          : "unexpected checkpoint tensors (not loaded; not fatal)",
      sections.unexpected, &out);
  AppendTextSection("tied groups", sections.tied, &out);
  AppendTextSection("non-persistent buffers", sections.non_persistent, &out);
  absl::StrAppend(&out, "\n", CheckVerdict(report, subject.strict), "\n");
  return out;
}

std::string CheckReportToJson(const MatchReport& report, const CheckSubject& subject) {
  const Sections sections = Explain(report);
  std::string out = "{\n";
  auto field = [&](absl::string_view key, const OrderedJson& value) {
    absl::StrAppend(&out, "  ", json_util::Quote(key), ": ", json_util::OneLineJson(value), ",\n");
  };
  // One entry per line, so that grep works as well as jq on thousands of findings.
  auto list = [&](absl::string_view key, const std::vector<OrderedJson>& entries) {
    absl::StrAppend(&out, "  ", json_util::Quote(key), ": [");
    for (size_t i = 0; i < entries.size(); ++i) {
      absl::StrAppend(&out, i == 0 ? "\n    " : ",\n    ", json_util::OneLineJson(entries[i]));
    }
    absl::StrAppend(&out, entries.empty() ? "],\n" : "\n  ],\n");
  };
  field("format", "metaload.check/1");
  field("skeleton", subject.skeleton);
  field("checkpoint", subject.checkpoint);
  field("model", subject.model);
  field("shapes_checked", report.shapes_checked);
  if (!report.shapes_checked) field("note", NamesOnlyNote(report));
  field("skeleton_tensors", report.skeleton_tensor_count);
  field("checkpoint_tensors", report.checkpoint_tensor_count);
  list("would_stay_meta", sections.would_stay_meta);
  list("missing_groups", sections.missing_groups);
  list("diagnosis", sections.diagnosis);
  list("refused_conversions", sections.refused_conversions);
  list("dtype_mismatches", sections.dtype_mismatches);
  list("unexpected", sections.unexpected);
  list("tied", sections.tied);
  list("non_persistent", sections.non_persistent);
  // Only for a quantized checkpoint, so that every other report stays as it was.
  if (!sections.quantization.empty()) {
    field("quantization", sections.quantization.front());
    list("dequantized", sections.dequantized);
    list("quantization_problems", sections.quantization_problems);
  }
  OrderedJson verdict;
  const size_t refused = subject.strict ? RefusedExtras(report).size() : 0;
  verdict["ok"] = CheckPasses(report, subject.strict);
  verdict["would_stay_meta"] = report.missing.size() + report.shape_mismatches.size();
  verdict["unexpected"] = report.unexpected.size();
  verdict["refused_unexpected"] = refused;
  verdict["refused_conversions"] = report.refused_conversions.size();
  if (report.quantization.has_value()) {
    verdict["quantization_refused"] = report.quantization->Refused();
    verdict["quantization_problems"] = report.quantization->problems.size();
    verdict["dequantized"] = report.quantization->dequantized.size();
  }
  verdict["line"] = CheckVerdict(report, subject.strict);
  if (!report.absent_shards.empty()) {
    verdict["fix"] =
        "download the missing shards; then check again (shapes and dtypes are checked once every "
        "shard is there)";
  } else if (report.WouldStayMeta()) {
    verdict["fix"] = absl::StrCat(
        "use the model class that matches the checkpoint, load the missing weights, or initialize new layers "
        "explicitly; ",
        kNeverMove);
  } else if (refused > 0) {
    verdict["fix"] =
        "use the skeleton of the checkpoint's own config, the checkpoint of this model, or --no-strict to "
        "load "
        "without the unexpected tensors";
  }
  absl::StrAppend(&out, "  \"verdict\": ", json_util::OneLineJson(verdict), "\n}\n");
  return out;
}

}  // namespace metaload
