// Making plans. Pure and deterministic: same inputs, byte-identical plan.
//
//   PlanRequest req{.skeleton = &s, .checkpoint = &ckpt, .cluster = &c, .world_size = 16};
//   ML_ASSIGN_OR_RETURN(Plan plan, MakePlan(req));
#ifndef METALOAD_PLANNER_STRATEGY_STRATEGY_H_
#define METALOAD_PLANNER_STRATEGY_STRATEGY_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/format/checkpoint.h"
#include "planner/plan/cluster.h"
#include "planner/plan/plan.h"
#include "planner/skeleton/skeleton.h"

namespace metaload {

// How to split a model: what `metactl plan` and `metactl load` flags and GetPlanRequest carry.
struct StrategyOptions {
  std::string strategy = "layers";
  // `tp` only: ranks per tensor-parallel group (inside one node) and pipeline stages; pp 0
  // means world / tp. world = tp x pp x data-parallel replicas.
  int tp = 1;
  int pp = 0;
  // Memory kept free on each GPU for activations and workspace: reserve_bytes when > 0, else
  // reserve_fraction of the GPU's memory.
  double reserve_fraction = 0.10;
  uint64_t reserve_bytes = 0;
  // `--dtype`: stored F16/BF16/F32/F64 tensors are converted to it on load, and every byte
  // count of the plan is in it. Absent: as stored. Computed buffers keep the skeleton's dtype.
  std::optional<DType> load_dtype;
};

struct PlanRequest {
  const Skeleton* skeleton = nullptr;      // REQUIRED
  const Checkpoint* checkpoint = nullptr;  // optional: items get file and offsets
  const Cluster* cluster = nullptr;        // REQUIRED
  int world_size = 0;                      // 0: every GPU of the cluster
  StrategyOptions options;
  // Plan tensors the checkpoint lacks as `missing` items instead of refusing: the model was
  // registered with an init policy, and each rank initializes them explicitly (or fails).
  bool allow_missing = false;
};

// Every rank's budget is its GPU's memory minus the reserve (options), for every strategy.
// Errors: InvalidArgument for an unknown strategy or bad world size; ResourceExhausted when
// the model does not fit, naming the rank or unit that overflows and by how much, and what
// would fit (more GPUs, a higher --tp, another --dtype: each planned); FailedPrecondition
// when a persistent skeleton tensor is missing from the checkpoint or its shape differs
// (naming the tensor).
absl::StatusOr<Plan> MakePlan(const PlanRequest& request);
// MakePlan's plan in its memory-lean form (plan.h CompactPlan), for planners of large clusters.
absl::StatusOr<CompactPlan> MakeCompactPlan(const PlanRequest& request);

// `layers`: whole placement units in model order, contiguous, balanced by bytes; a no-split
// module is never split; tied tensors share a rank.
absl::StatusOr<Plan> MakeLayersPlan(const PlanRequest& request);

// `replicate`: every rank holds every tensor whole.
absl::StatusOr<Plan> MakeReplicatePlan(const PlanRequest& request);
// `fsdp`: like FSDP2's Shard(0): every tensor with a dim split on dim 0 across all ranks in
// chunks of ceil(dim0 / world) (ChunkSlice, planner/plan/slice.h), the last ranks holding less
// and those past the end an empty slice (0 bytes), so every rank has an item for every tensor as
// every FSDP2 rank has a local tensor; scalars and non-persistent buffers on every rank.
absl::StatusOr<Plan> MakeFsdpPlan(const PlanRequest& request);
// `tp`: groups of `tp` consecutive ranks inside a node split tensors by
// planner/strategy/strategies/tp_rules.h, attention projections on head boundaries
// (planner/strategy/strategies/tp_split.h: key/value heads replicated when tp exceeds them); pipeline stages
// of whole placement units across groups, balanced by bytes of the fullest rank of a group; data-parallel
// replicas repeat the same slices. A split dimension that does not divide by tp splits unevenly, as DTensor's
// Shard(dim) does (ChunkSlice); a split that would not give each rank whole heads is InvalidArgument naming
// the tensor. InvalidArgument, before anything is allocated, unless tp and pp are in [1, world] (pp 0: world
// / tp) and tp x pp divides the world.
absl::StatusOr<Plan> MakeTpPlan(const PlanRequest& request);

// Building block for strategies: one whole-tensor ReadItem per skeleton tensor, in skeleton
// order. With a checkpoint, persistent tensors get its file, offsets and dtype (a tied
// tensor may be stored under any name of its group); non-persistent buffers get no file and
// their init rule. FailedPrecondition as for MakePlan when a persistent tensor has another
// shape, or is missing and !allow_missing (then it becomes a `missing` item). With
// `load_dtype`, persistent floating-point items get to_dtype (when it differs) and bytes in it.
absl::StatusOr<std::vector<ReadItem>> WholeTensorItems(const Skeleton& skeleton, const Checkpoint* checkpoint,
                                                       bool allow_missing = false,
                                                       std::optional<DType> load_dtype = std::nullopt);

// Checks a plan against its skeleton. Ranks form plan.replicas consecutive replicas, each of
// groups of plan.group_size consecutive ranks. Inside each replica every persistent tensor
// lives in one group, and there either every rank of the group holds it whole, or the
// group's slices (one dim, at most one per rank) cover every index of it the same number of
// times: once, or m times when m ranks share each piece (replicated key/value heads); an empty
// slice (a rank past the end of an uneven split) covers nothing. No rank over its budget.
// Errors name the tensor, the slice and the ranks.
absl::Status ValidatePlan(const Plan& plan, const Skeleton& skeleton);

}  // namespace metaload

#endif  // METALOAD_PLANNER_STRATEGY_STRATEGY_H_
