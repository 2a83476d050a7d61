// Strategy dispatch through the registry, the read items all strategies start from, and what
// the options say about a plan (its cache key, its label).
#include "planner/strategy/strategy.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "planner/doctor/match.h"
#include "planner/format/tensor_layout.h"
#include "planner/plan/slice.h"
#include "planner/strategy/fit.h"
#include "planner/strategy/strategy_registry.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

// The checkpoint entry holding `name`: under its own name, else (a tied group's stored
// tensor) under one of its aliases, since checkpoints disagree on which name they keep.
const TensorLayout* FindStored(
    const Checkpoint& checkpoint, const std::string& name,
    const absl::flat_hash_map<std::string, const std::vector<std::string>*>& groups) {
  if (const TensorLayout* layout = checkpoint.Find(name)) return layout;
  auto group = groups.find(name);
  if (group == groups.end()) return nullptr;
  for (const std::string& alias : *group->second) {
    if (const TensorLayout* layout = checkpoint.Find(alias)) return layout;
  }
  return nullptr;
}

const QuantizedValue* FindValue(const QuantizedSet& set, const std::string& name) {
  auto value = set.values.find(name);
  return value == set.values.end() ? nullptr : &value->second;
}

}  // namespace

absl::StatusOr<Plan> MakePlan(const PlanRequest& request) {
  ML_ASSIGN_OR_RETURN(CompactPlan plan, MakeCompactPlan(request));
  return plan.Expand();
}

absl::StatusOr<CompactPlan> MakeCompactPlan(const PlanRequest& request) {
  const Strategy* strategy = FindStrategy(request.options.strategy);
  if (strategy == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown strategy \"", request.options.strategy,
                                                   "\" (supported: ", StrategyNames(), ")"));
  }
  return PlanOrExplain(request, *strategy);
}

std::string StrategyOptionsKey(const StrategyOptions& options) {
  std::string key = options.strategy;
  for (const Strategy* strategy : Strategies()) {
    for (const StrategyFlag& flag : strategy->flags)
      absl::StrAppend(&key, "|", flag.name, "=", options.*flag.field);
  }
  absl::StrAppend(&key, "|reserve=", options.reserve_fraction, "/", options.reserve_bytes,
                  "|dtype=", options.load_dtype.has_value() ? DTypeCode(*options.load_dtype) : "-");
  // Only when set, so that every other plan keeps the key (and digest) it always had.
  if (options.dequantize) key += "|dequantize";
  return key;
}

std::string StrategyLabel(const StrategyOptions& options) {
  const Strategy* strategy = FindStrategy(options.strategy);
  return strategy != nullptr && strategy->label != nullptr ? strategy->label(options) : options.strategy;
}

absl::StatusOr<std::vector<ReadItem>> WholeTensorItems(const Skeleton& skeleton, const Checkpoint* checkpoint,
                                                       bool allow_missing, std::optional<DType> load_dtype,
                                                       const QuantizedSet* dequantize) {
  absl::flat_hash_map<std::string, const std::vector<std::string>*> groups;
  for (const std::vector<std::string>& group : skeleton.tied_groups) {
    if (!group.empty()) groups.emplace(group.front(), &group);
  }
  std::vector<ReadItem> items;
  items.reserve(skeleton.tensors.size());
  // Collected like the meta doctor's report, so `plan`, `register` and `check` describe
  // a tensor that would stay on meta in the same words.
  MatchReport problems;
  for (const SkeletonTensor& tensor : skeleton.tensors) {
    ReadItem item;
    item.tensor = tensor.name;
    item.dtype = tensor.dtype;
    item.shape = tensor.shape;
    item.size_bytes = tensor.size_bytes();
    const TensorLayout* layout =
        checkpoint != nullptr && tensor.persistent ? FindStored(*checkpoint, tensor.name, groups) : nullptr;
    const QuantizedValue* value =
        dequantize != nullptr && tensor.persistent ? FindValue(*dequantize, tensor.name) : nullptr;
    if (value != nullptr && (layout == nullptr || layout->name == value->codes.name)) {
      if (value->shape != tensor.shape) {
        problems.shape_mismatches.push_back(
            TensorMismatch{tensor.name, tensor.shape, value->shape, tensor.dtype, value->codes.dtype, ""});
      } else {
        // Held in the target dtype; read as its codes and scales.
        item.dtype = load_dtype.value_or(IsConvertibleFloat(tensor.dtype) ? tensor.dtype : DType::kBF16);
        item.size_bytes = SliceSizeBytes(item.shape, item.dtype, std::nullopt);
        item.dequantize = DequantizedFrom{value->Rule(), value->codes, value->scales};
      }
      items.push_back(std::move(item));
      continue;
    }
    if (!tensor.persistent) {
      item.init = tensor.init;
    } else if (checkpoint != nullptr && layout == nullptr) {
      if (allow_missing) {
        item.missing = true;
      } else {
        problems.missing.push_back(tensor.name);
      }
    } else if (layout != nullptr && layout->shape != tensor.shape) {
      problems.shape_mismatches.push_back(
          TensorMismatch{tensor.name, tensor.shape, layout->shape, tensor.dtype, layout->dtype,
                         layout->name == tensor.name ? std::string() : layout->name});
    } else if (layout != nullptr) {
      // The rank holds what the file holds: converting to the skeleton's dtype on load
      // comes later, so until then the checkpoint's dtype and size are the truth.
      item.dtype = layout->dtype;
      item.size_bytes = layout->size_bytes();
      item.file = layout->file;
      item.begin_offset = layout->begin_offset;
      item.end_offset = layout->end_offset;
      item.stored_digest = layout->digest;
      item.stored_index = layout->index;
    }
    if (load_dtype.has_value() && tensor.persistent && *load_dtype != item.dtype &&
        IsConvertibleFloat(item.dtype) && IsConvertibleFloat(*load_dtype)) {
      item.to_dtype = *load_dtype;
      item.size_bytes = SliceSizeBytes(item.shape, *load_dtype, std::nullopt);
    }
    items.push_back(std::move(item));
  }
  GroupMissingTensors(skeleton, &problems);
  ML_RETURN_IF_ERROR(MatchToStatus(problems, skeleton.model.empty() ? "(unnamed)" : skeleton.model));
  return items;
}

}  // namespace metaload
