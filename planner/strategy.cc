// Strategy dispatch, the read items all strategies start from, and the plan validator.
#include "planner/strategy.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/match.h"
#include "planner/status_macros.h"
#include "planner/tensor_layout.h"
#include "planner/units.h"

namespace metaload {
namespace {

constexpr absl::string_view kSupportedStrategies[] = {"layers"};

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

}  // namespace

absl::StatusOr<Plan> MakePlan(const PlanRequest& request) {
  if (request.strategy == "layers") return MakeLayersPlan(request);
  return absl::InvalidArgumentError(absl::StrCat("unknown strategy \"", request.strategy, "\" (supported: ",
                                                 absl::StrJoin(kSupportedStrategies, ", "), ")"));
}

absl::StatusOr<std::vector<ReadItem>> WholeTensorItems(const Skeleton& skeleton,
                                                       const Checkpoint* checkpoint, bool allow_missing) {
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
    }
    items.push_back(std::move(item));
  }
  ML_RETURN_IF_ERROR(MatchToStatus(problems, skeleton.model.empty() ? "(unnamed)" : skeleton.model));
  return items;
}

absl::Status ValidatePlan(const Plan& plan, const Skeleton& skeleton) {
  if (plan.world_size != static_cast<int>(plan.ranks.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan has world size ", plan.world_size, " but ", plan.ranks.size(), " ranks"));
  }
  absl::flat_hash_map<std::string, const SkeletonTensor*> tensors;
  for (const SkeletonTensor& tensor : skeleton.tensors) tensors.emplace(tensor.name, &tensor);
  absl::flat_hash_map<std::string, int> rank_of_tensor;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const RankPlan& rank = plan.ranks[r];
    if (rank.rank != static_cast<int>(r)) {
      return absl::InvalidArgumentError(absl::StrCat("ranks[", r, "] says it is rank ", rank.rank));
    }
    uint64_t items_bytes = 0;
    for (const ReadItem& item : rank.items) {
      auto tensor = tensors.find(item.tensor);
      if (tensor == tensors.end()) {
        return absl::InvalidArgumentError(absl::StrCat("rank ", r, " has an item for tensor ", item.tensor,
                                                       ", which the skeleton does not have"));
      }
      // Whole-tensor items only for now; slicing strategies will check slice bounds here.
      if (item.shape != tensor->second->shape) {
        return absl::InvalidArgumentError(absl::StrCat("rank ", r, ": tensor ", item.tensor, " has shape ",
                                                       ShapeToString(item.shape), " but the skeleton says ",
                                                       ShapeToString(tensor->second->shape)));
      }
      auto [seen, inserted] = rank_of_tensor.emplace(item.tensor, rank.rank);
      if (!inserted) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", item.tensor, " is assigned to rank ", seen->second, " and to rank ", r));
      }
      if (AddOverflows(items_bytes, item.size_bytes, &items_bytes)) {
        return absl::InvalidArgumentError(absl::StrCat("rank ", r, ": item sizes add up past 2^64 bytes"));
      }
    }
    if (items_bytes != rank.size_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", r, " says it holds ", rank.size_bytes,
                                                     " bytes but its items add up to ", items_bytes));
    }
    if (rank.budget_bytes > 0 && rank.size_bytes > rank.budget_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat("rank ", r, " holds ", FormatBytes(rank.size_bytes),
                                                       ", over its budget of ",
                                                       FormatBytes(rank.budget_bytes)));
    }
  }
  for (const SkeletonTensor& tensor : skeleton.tensors) {
    if (tensor.persistent && !rank_of_tensor.contains(tensor.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", tensor.name, " is assigned to no rank (it would stay on meta)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace metaload
