// Making plans. Pure and deterministic: same inputs, byte-identical plan.
//
//   PlanRequest req{.skeleton = &s, .checkpoint = &ckpt, .cluster = &c, .world_size = 16};
//   ML_ASSIGN_OR_RETURN(Plan plan, MakePlan(req));
#ifndef METALOAD_PLANNER_STRATEGY_H_
#define METALOAD_PLANNER_STRATEGY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/checkpoint.h"
#include "planner/cluster.h"
#include "planner/plan.h"
#include "planner/skeleton.h"

namespace metaload {

struct PlanRequest {
  const Skeleton* skeleton = nullptr;      // REQUIRED
  const Checkpoint* checkpoint = nullptr;  // optional: items get file and offsets
  const Cluster* cluster = nullptr;        // REQUIRED
  int world_size = 0;                      // 0: every GPU of the cluster
  std::string strategy = "layers";
  // Plan tensors the checkpoint lacks as `missing` items instead of refusing: the model was
  // registered with an init policy, and each rank initializes them explicitly (or fails).
  bool allow_missing = false;
};

// Errors: InvalidArgument for an unknown strategy or bad world size; ResourceExhausted when
// the model does not fit (naming the largest unit and the memory it needs); FailedPrecondition
// when a persistent skeleton tensor is missing from the checkpoint or its shape differs
// (naming the tensor).
absl::StatusOr<Plan> MakePlan(const PlanRequest& request);

// `layers`: whole placement units in model order, contiguous, balanced by bytes; a no-split
// module is never split; tied tensors share a rank.
absl::StatusOr<Plan> MakeLayersPlan(const PlanRequest& request);

// Building block for strategies: one whole-tensor ReadItem per skeleton tensor, in skeleton
// order. With a checkpoint, persistent tensors get its file, offsets and dtype (a tied
// tensor may be stored under any name of its group); non-persistent buffers get no file and
// their init rule. FailedPrecondition as for MakePlan when a persistent tensor has another
// shape, or is missing and !allow_missing (then it becomes a `missing` item).
absl::StatusOr<std::vector<ReadItem>> WholeTensorItems(const Skeleton& skeleton,
                                                       const Checkpoint* checkpoint, bool allow_missing = false);

// Checks a plan against its skeleton: every persistent tensor assigned exactly once
// (layers/fsdp/tp coverage), no rank over budget. Errors name the tensor and rank.
absl::Status ValidatePlan(const Plan& plan, const Skeleton& skeleton);

}  // namespace metaload

#endif  // METALOAD_PLANNER_STRATEGY_H_
