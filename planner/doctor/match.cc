#include "planner/doctor/match.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "planner/doctor/shape_summary.h"
#include "planner/format/dtype_conversion.h"
#include "planner/format/tensor_layout.h"
#include "util/error_kind.h"

namespace metaload {
namespace {

// What a checkpoint holds as far as the doctor can know: every name in checkpoint order,
// each one's layout when the weights were read, nullptr when only the index was.
struct StoredTensors {
  std::vector<const std::string*> names;
  absl::flat_hash_map<absl::string_view, const TensorLayout*> layouts;
  bool Has(absl::string_view name) const { return layouts.contains(name); }
};

TiedGroupMatch ResolveTiedGroup(const std::vector<std::string>& group, const StoredTensors& stored) {
  TiedGroupMatch match;
  match.names = group;
  const bool first_stored = stored.Has(group.front());
  for (size_t i = 1; i < group.size(); ++i) {
    if (stored.Has(group[i])) match.ignored_aliases.push_back(group[i]);
  }
  if (first_stored) {
    match.read_from = group.front();
    match.source = match.ignored_aliases.empty() ? TiedSource::kFirstName : TiedSource::kBoth;
  } else if (!match.ignored_aliases.empty()) {
    // Checkpoints disagree on which name of a tie they keep (safetensors drops all but one,
    // and not always the first): take the first alias stored, as loading does.
    match.source = TiedSource::kAliasOnly;
    match.read_from = match.ignored_aliases.front();
    match.ignored_aliases.clear();
  } else {
    match.source = TiedSource::kNone;
  }
  return match;
}

// Finds a leading prefix that, added to or removed from checkpoint names, makes most missing
// names match unexpected ones: the signature of a model saved from a wrapper (DDP's
// "module.", torch.compile's "_orig_mod.", PEFT's "base_model.model.") or as a base model.
std::optional<PrefixHint> FindPrefixHint(const std::vector<std::string>& missing,
                                         const std::vector<std::string>& unexplained) {
  if (missing.empty() || unexplained.empty()) return std::nullopt;
  const absl::flat_hash_set<absl::string_view> missing_set(missing.begin(), missing.end());
  const absl::flat_hash_set<absl::string_view> unexplained_set(unexplained.begin(), unexplained.end());
  std::optional<PrefixHint> best;
  // `longer` names = prefix + a name of `shorter_set`. A few samples are enough: a prefix
  // that explains most names explains one of the first three.
  auto try_side = [&](const std::vector<std::string>& longer,
                      const absl::flat_hash_set<absl::string_view>& shorter_set, bool checkpoint_has_it) {
    for (size_t sample = 0; sample < longer.size() && sample < 3; ++sample) {
      const std::string& name = longer[sample];
      for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1)) {
        if (!shorter_set.contains(absl::string_view(name).substr(dot + 1))) continue;
        const std::string prefix = name.substr(0, dot + 1);
        size_t matched = 0;
        for (const std::string& other : longer) {
          matched += absl::StartsWith(other, prefix) &&
                     shorter_set.contains(absl::string_view(other).substr(prefix.size()));
        }
        if (!best.has_value() || matched > best->matched)
          best = PrefixHint{prefix, checkpoint_has_it, matched};
      }
    }
  };
  try_side(missing, unexplained_set, /*checkpoint_has_it=*/false);
  try_side(unexplained, missing_set, /*checkpoint_has_it=*/true);
  // Worth saying only when it explains most of what is missing.
  if (!best.has_value() || best->matched * 2 <= missing.size()) return std::nullopt;
  return best;
}

// The block list the unexplained extras extend furthest past the skeleton's, if any.
std::optional<LayerCountHint> FindLayerCountHint(const Skeleton& skeleton,
                                                 const std::vector<std::string>& unexplained) {
  absl::flat_hash_map<std::string, int64_t> skeleton_count;
  for (const SkeletonTensor& t : skeleton.tensors) {
    const BlockOf block = NumberedBlock(t.name);
    if (block.index < 0) continue;
    int64_t& count = skeleton_count[block.container];
    count = std::max(count, block.index + 1);
  }
  std::optional<LayerCountHint> best;
  for (const std::string& name : unexplained) {
    const BlockOf block = NumberedBlock(name);
    auto have = skeleton_count.find(block.container);
    if (block.index < 0 || have == skeleton_count.end() || block.index < have->second) continue;
    if (!best.has_value() || block.index + 1 > best->checkpoint_count) {
      best = LayerCountHint{block.container, block.index + 1, have->second};
    }
  }
  return best;
}

MatchReport MatchStored(const Skeleton& skeleton, const StoredTensors& stored, bool shapes_known) {
  MatchReport report;
  report.shapes_checked = shapes_known;
  report.checkpoint_tensor_count = stored.names.size();

  absl::flat_hash_set<absl::string_view> known;  // names the skeleton accounts for
  absl::flat_hash_map<absl::string_view, size_t> group_of_first;
  for (const std::vector<std::string>& group : skeleton.tied_groups) {
    if (group.empty()) continue;
    group_of_first.emplace(group.front(), report.tied.size());
    report.tied.push_back(ResolveTiedGroup(group, stored));
    known.insert(group.begin(), group.end());
  }

  for (const SkeletonTensor& t : skeleton.tensors) {
    known.insert(t.name);
    if (!t.persistent) {
      report.non_persistent.push_back(
          NonPersistentBuffer{t.name, t.shape, t.dtype, t.init, stored.Has(t.name)});
      continue;
    }
    ++report.skeleton_tensor_count;
    std::string read_from = t.name;
    if (auto group = group_of_first.find(t.name); group != group_of_first.end()) {
      read_from = report.tied[group->second].read_from;
    }
    auto layout = read_from.empty() ? stored.layouts.end() : stored.layouts.find(read_from);
    if (layout == stored.layouts.end()) {
      report.missing.push_back(t.name);
      continue;
    }
    if (layout->second == nullptr) continue;  // names only: nothing more to compare
    const TensorLayout& found = *layout->second;
    TensorMismatch mismatch{t.name,  t.shape,     found.shape,
                            t.dtype, found.dtype, read_from == t.name ? "" : read_from};
    if (found.shape != t.shape) {
      report.shape_mismatches.push_back(std::move(mismatch));
    } else if (found.dtype != t.dtype) {
      std::string refused = ConversionRefusal(
          found.name, found.dtype, t.dtype, [&stored](const std::string& name) { return stored.Has(name); });
      if (refused.empty()) {
        report.dtype_mismatches.push_back(std::move(mismatch));
      } else {
        report.refused_conversions.emplace_back(std::move(mismatch), std::move(refused));
      }
    }
  }

  std::vector<std::string> unexplained;
  for (const std::string* name : stored.names) {
    if (known.contains(*name)) continue;
    report.unexpected.push_back(*name);
    const ExtraKind kind = ClassifyExtra(*name);
    if (kind == ExtraKind::kOther) unexplained.push_back(*name);
    auto group = report.extras.begin();
    while (group != report.extras.end() && group->kind < kind) ++group;
    if (group == report.extras.end() || group->kind != kind) group = report.extras.insert(group, {kind, {}});
    group->names.push_back(*name);
  }
  report.different_architecture = unexplained.size() * 2 > report.checkpoint_tensor_count &&
                                  report.missing.size() * 2 > report.skeleton_tensor_count;
  report.prefix_hint = FindPrefixHint(report.missing, unexplained);
  report.layer_hint = FindLayerCountHint(skeleton, unexplained);
  return report;
}

}  // namespace

ExtraKind ClassifyExtra(absl::string_view name) {
  const std::vector<absl::string_view> parts = absl::StrSplit(name, '.');
  const absl::string_view last = parts.back();
  const absl::string_view before_last = parts.size() >= 2 ? parts[parts.size() - 2] : "";
  if (last == "SCB" || last == "weight_format") return ExtraKind::kBitsandbytes8bit;
  for (absl::string_view part : parts) {
    // bitsandbytes 4-bit keeps its state under the weight: "x.weight.quant_state.bitsandbytes__nf4".
    if (part == "absmax" || part == "quant_map" || part == "quant_state" || part == "nested_absmax" ||
        part == "nested_quant_map") {
      return ExtraKind::kBitsandbytes4bit;
    }
  }
  if (last == "qweight" || last == "qzeros" || last == "scales" || last == "g_idx") {
    return ExtraKind::kPackedQuantized;
  }
  if (last == "weight_scale" || last == "weight_scale_inv" || last == "input_scale") {
    return ExtraKind::kFp8Scales;
  }
  if (last == "inv_freq") return ExtraKind::kRotaryInvFreq;
  if (last == "masked_bias" || last == "position_ids" || (last == "bias" && before_last == "attn")) {
    return ExtraKind::kStaleBuffer;
  }
  return ExtraKind::kOther;
}

bool IsQuantizationState(ExtraKind kind) {
  return kind == ExtraKind::kBitsandbytes8bit || kind == ExtraKind::kBitsandbytes4bit ||
         kind == ExtraKind::kPackedQuantized || kind == ExtraKind::kFp8Scales;
}

absl::string_view ExtraKindId(ExtraKind kind) {
  // In ExtraKind order.
  static constexpr absl::string_view kIds[] = {
      "bitsandbytes-8bit", "bitsandbytes-4bit", "gptq-awq", "fp8-scales",
      "rotary-inv-freq",   "stale-buffer",      "other"};
  static_assert(std::size(kIds) == static_cast<size_t>(ExtraKind::kOther) + 1, "one id per ExtraKind");
  return kIds[static_cast<size_t>(kind)];
}

std::vector<std::string> MatchReport::WouldStayMetaNames() const {
  std::vector<std::string> names = missing;
  for (const TensorMismatch& m : shape_mismatches) names.push_back(m.name);
  return names;
}

size_t MatchReport::unexplained_extra_count() const {
  for (const ExtraGroup& group : extras) {
    if (group.kind == ExtraKind::kOther) return group.names.size();
  }
  return 0;
}

MatchReport MatchSkeleton(const Skeleton& skeleton, const Checkpoint& checkpoint) {
  StoredTensors stored;
  stored.names.reserve(checkpoint.tensors.size());
  for (const TensorLayout& t : checkpoint.tensors) {
    stored.names.push_back(&t.name);
    stored.layouts.emplace(t.name, &t);
  }
  MatchReport report = MatchStored(skeleton, stored, /*shapes_known=*/true);
  GroupMissingTensors(skeleton, &report);
  return report;
}

MatchReport MatchSkeletonNames(const Skeleton& skeleton, const CheckpointIndex& index,
                               absl::string_view names_only_reason) {
  StoredTensors stored;
  stored.names.reserve(index.weight_map.size());
  for (const auto& [name, shard] : index.weight_map) {
    stored.names.push_back(&name);
    stored.layouts.emplace(name, nullptr);
  }
  MatchReport report = MatchStored(skeleton, stored, /*shapes_known=*/false);
  report.names_only_reason =
      names_only_reason.empty() ? "only the index is present" : std::string(names_only_reason);
  GroupMissingTensors(skeleton, &report);
  return report;
}

MatchReport MatchSkeletonPartialDownload(const Skeleton& skeleton, const CheckpointIndex& index,
                                         const std::set<std::string>& absent) {
  StoredTensors stored;
  std::map<std::string, AbsentShard> absent_by_file;
  std::set<absl::string_view> shards;
  for (const auto& [name, shard] : index.weight_map) {
    shards.insert(shard);
    if (absent.count(shard) != 0) {
      AbsentShard& entry = absent_by_file[shard];
      entry.file = shard;
      entry.tensors.push_back(name);  // weight_map is a std::map: by name
      continue;
    }
    stored.names.push_back(&name);
    stored.layouts.emplace(name, nullptr);
  }
  MatchReport report = MatchStored(skeleton, stored, /*shapes_known=*/false);
  for (auto& [file, shard] : absent_by_file) report.absent_shards.push_back(std::move(shard));
  report.index_shard_count = shards.size();
  report.names_only_reason =
      absl::StrCat(report.absent_shards.size(), " of ", report.index_shard_count,
                   report.absent_shards.size() == 1 ? " shards is" : " shards are", " not in the folder");
  GroupMissingTensors(skeleton, &report);
  return report;
}

void GroupMissingTensors(const Skeleton& skeleton, MatchReport* report) {
  std::vector<std::string> missing, unusable;
  for (const std::string& name : report->missing) {
    if (AbsentShardHolding(*report, name) == nullptr) missing.push_back(name);
  }
  for (const TensorMismatch& m : report->shape_mismatches) unusable.push_back(m.name);
  report->missing_groups.clear();
  for (MissingGroup& group : GroupMissing(missing, skeleton, unusable)) {
    if (group.kind != MissingKind::kTensor) report->missing_groups.push_back(std::move(group));
  }
}

std::vector<std::string> GroupedWouldStayMetaFindings(const MatchReport& report) {
  const absl::flat_hash_set<absl::string_view> missing(report.missing.begin(), report.missing.end());
  std::vector<std::string> findings;
  absl::flat_hash_set<absl::string_view> grouped;
  for (const MissingGroup& group : report.missing_groups) {
    // A caller may have cleared `missing` since (an init policy covers it): then so is the group.
    if (!std::all_of(group.tensors.begin(), group.tensors.end(),
                     [&](const std::string& name) { return missing.contains(name); })) {
      continue;
    }
    findings.push_back(group.message);
    grouped.insert(group.tensors.begin(), group.tensors.end());
  }
  const std::vector<std::string> names = report.WouldStayMetaNames();
  const std::vector<std::string> each = WouldStayMetaFindings(report);
  for (size_t i = 0; i < names.size(); ++i) {
    if (i >= report.missing.size() || !grouped.contains(names[i])) findings.push_back(each[i]);
  }
  return findings;
}

const AbsentShard* AbsentShardHolding(const MatchReport& report, absl::string_view tensor) {
  std::vector<absl::string_view> names = {tensor};
  for (const TiedGroupMatch& group : report.tied) {
    if (group.names.front() == tensor) names.assign(group.names.begin(), group.names.end());
  }
  for (const AbsentShard& shard : report.absent_shards) {
    for (absl::string_view name : names) {
      if (std::binary_search(shard.tensors.begin(), shard.tensors.end(), name)) return &shard;
    }
  }
  return nullptr;
}

std::vector<std::string> WouldStayMetaFindings(const MatchReport& report) {
  absl::flat_hash_map<absl::string_view, const TiedGroupMatch*> group_of_first;
  for (const TiedGroupMatch& group : report.tied) group_of_first.emplace(group.names.front(), &group);
  std::vector<std::string> findings;
  for (const std::string& name : report.missing) {
    if (const AbsentShard* shard = AbsentShardHolding(report, name)) {
      findings.push_back(absl::StrCat(name, " is in shard ", shard->file,
                                      ", which is not in the checkpoint's folder (the index names it)"));
      continue;
    }
    std::string finding = absl::StrCat(name, " is in the skeleton but not in the checkpoint");
    if (auto group = group_of_first.find(name); group != group_of_first.end()) {
      const std::vector<std::string>& names = group->second->names;
      absl::StrAppend(&finding,
                      names.size() == 2 ? " (nor is its tied alias " : " (nor are its tied aliases ",
                      absl::StrJoin(names.begin() + 1, names.end(), ", "), ")");
    }
    findings.push_back(std::move(finding));
  }
  for (const TensorMismatch& m : report.shape_mismatches) {
    findings.push_back(absl::StrCat(
        m.name, " has shape ", ShapeToString(m.skeleton_shape), " in the skeleton but ",
        ShapeToString(m.checkpoint_shape), " in the checkpoint",
        m.stored_as.empty() ? "" : absl::StrCat(" (stored as its tied alias ", m.stored_as, ")")));
  }
  return findings;
}

absl::Status MatchToStatus(const MatchReport& report, const std::string& model_name) {
  if (!report.WouldStayMeta()) return absl::OkStatus();
  // Shapes that differ in many tensors are said in one line first, and fewer findings follow.
  const std::optional<std::string> shapes = ShapeMismatchSummary(report.shape_mismatches);
  const size_t kMaxNamed = shapes.has_value() ? kFindingsAfterSummary : 20;
  std::vector<std::string> findings = GroupedWouldStayMetaFindings(report);
  const size_t total = report.missing.size() + report.shape_mismatches.size();
  if (findings.size() > kMaxNamed) {
    const size_t more = findings.size() - kMaxNamed;
    findings.resize(kMaxNamed);
    findings.push_back(absl::StrCat("and ", more, " more"));
  }
  return RefusedModelError(absl::StrCat(
      "model ", model_name, ": ", total, total == 1 ? " tensor" : " tensors", " would stay on meta: ",
      shapes.has_value() ? absl::StrCat(*shapes, "; ") : "", absl::StrJoin(findings, "; "),
      "; fix: use the model class that matches the checkpoint, load the missing weights, or initialize "
      "new layers explicitly (--init-missing zeros|normal:STD on register and load); `metactl check` "
      "explains each"));
}

}  // namespace metaload
