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
#include "planner/format/quantization.h"
#include "planner/plan/cluster.h"
#include "planner/plan/plan.h"
#include "planner/skeleton/skeleton.h"

namespace metaload {

// How to split a model: what `metactl plan` and `metactl load` flags and GetPlanRequest carry.
struct StrategyOptions {
  // The strategy's name, as flags and requests give it: FindStrategy
  // (planner/strategy/strategy_registry.h) says what it is, MakePlan refuses one it does not know.
  std::string strategy = "layers";
  // The `tp` strategy's own options (its record's flags): ranks per tensor-parallel group
  // (inside one node) and pipeline stages; pp 0 means world / tp. world = tp x pp x replicas.
  int tp = 1;
  int pp = 0;
  // The options every strategy takes. Memory kept free on each GPU for activations and
  // workspace: reserve_bytes when > 0, else reserve_fraction of the GPU's memory.
  double reserve_fraction = 0.10;
  uint64_t reserve_bytes = 0;
  // `--dtype`: stored F16/BF16/F32/F64 tensors are converted to it on load, and every byte
  // count of the plan is in it. Absent: as stored. Computed buffers keep the skeleton's dtype.
  std::optional<DType> load_dtype;
  // `--dequantize` (a daemon's plan: GetPlanRequest.dequantize): the values a quantized checkpoint
  // stores as codes and scales are planned as dequantized items. The planner itself reads
  // PlanRequest::dequantize (the values); whoever makes the request sets it from this flag.
  bool dequantize = false;
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
  // `metactl plan --dequantize`: the checkpoint's quantized values (FindQuantized) a rank computes
  // from codes and scales. Each skeleton tensor that is such a value is held in `options.load_dtype`
  // (absent: the skeleton's dtype when floating-point, else BF16) and counted in it; its item names
  // the codes and scales read (ReadItem::dequantize). Null: every tensor as stored.
  const QuantizedSet* dequantize = nullptr;
};

// The plan of the strategy the options name (planner/strategy/strategies/: layers, tp, fsdp,
// replicate). Every rank's budget is its GPU's memory minus the reserve (options).
// Errors: InvalidArgument for an unknown strategy (listing the known) or bad world size; ResourceExhausted
// when the model does not fit, naming the rank or unit that overflows and by how much, and what would fit
// (more GPUs, a higher --tp, another --dtype: each planned); FailedPrecondition when a persistent skeleton
// tensor is missing from the checkpoint or its shape differs (naming the tensor).
absl::StatusOr<Plan> MakePlan(const PlanRequest& request);
// MakePlan's plan in its memory-lean form (plan.h CompactPlan), for planners of large clusters.
absl::StatusOr<CompactPlan> MakeCompactPlan(const PlanRequest& request);

// What a plan depends on in `options`, as one string ("layers|tp=1|pp=0|reserve=0.1/0|dtype=-"):
// the key a plan cache and PlanDigest use. Every strategy's own options appear, whichever the
// strategy, so that the bytes stay those plans have always been keyed and digested by.
std::string StrategyOptionsKey(const StrategyOptions& options);

// The strategy and its own options in a few words ("tp 2 x pp 1", "fsdp"), for labels.
std::string StrategyLabel(const StrategyOptions& options);

// Building block for strategies: one whole-tensor ReadItem per skeleton tensor, in skeleton
// order. With a checkpoint, persistent tensors get its file, offsets and dtype (a tied
// tensor may be stored under any name of its group); non-persistent buffers get no file and
// their init rule. FailedPrecondition as for MakePlan when a persistent tensor has another
// shape, or is missing and !allow_missing (then it becomes a `missing` item). With
// `load_dtype`, persistent floating-point items get to_dtype (when it differs) and bytes in it.
// With `dequantize` (PlanRequest::dequantize), its values become dequantized items.
absl::StatusOr<std::vector<ReadItem>> WholeTensorItems(const Skeleton& skeleton, const Checkpoint* checkpoint,
                                                       bool allow_missing = false,
                                                       std::optional<DType> load_dtype = std::nullopt,
                                                       const QuantizedSet* dequantize = nullptr);

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
