// Matching a skeleton against a checkpoint: what would stay on meta, what is extra, what
// differs. The basis of `register`'s refusal and of the meta doctor (`metactl check`).
#ifndef METALOAD_PLANNER_MATCH_H_
#define METALOAD_PLANNER_MATCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "planner/checkpoint.h"
#include "planner/skeleton.h"

namespace metaload {

struct TensorMismatch {
  std::string name;
  std::vector<int64_t> skeleton_shape;
  std::vector<int64_t> checkpoint_shape;
  DType skeleton_dtype = DType::kF32;
  DType checkpoint_dtype = DType::kF32;
};

struct MatchReport {
  // Persistent skeleton tensors the checkpoint lacks: they would stay on meta.
  std::vector<std::string> missing;
  // Checkpoint tensors the skeleton does not name (not fatal: they are not loaded).
  std::vector<std::string> unexpected;
  // Same name, different shape: cannot be loaded, so would stay on meta.
  std::vector<TensorMismatch> shape_mismatches;
  // Same name and shape, different dtype: converted on load.
  std::vector<TensorMismatch> dtype_mismatches;

  bool WouldStayMeta() const { return !missing.empty() || !shape_mismatches.empty(); }
};

// Names in each list keep skeleton order (unexpected: checkpoint order).
MatchReport MatchSkeleton(const Skeleton& skeleton, const Checkpoint& checkpoint);

// OK unless WouldStayMeta(); then FailedPrecondition naming every such tensor (the first
// 20, then a count), e.g. "model llama: 2 tensors would stay on meta: lm_head.weight is in
// the skeleton but not in the checkpoint; ...".
absl::Status MatchToStatus(const MatchReport& report, const std::string& model_name);

}  // namespace metaload

#endif  // METALOAD_PLANNER_MATCH_H_
