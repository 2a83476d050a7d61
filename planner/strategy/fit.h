// Fitting a plan into GPU budgets, for every strategy: what each strategy starts from (the
// ranks' slots and budgets: the GPU's memory minus --reserve), and what a refusal says when no
// plan fits: which rank or unit overflows, by how much, and what would fit instead (more GPUs,
// a higher --tp, another --dtype), each alternative checked by planning it. Internal to
// planner/: users call MakePlan.
//
//   absl::StatusOr<CompactPlan> plan = PlanOrExplain(request, *FindStrategy(request.options.strategy));
#ifndef METALOAD_PLANNER_STRATEGY_FIT_H_
#define METALOAD_PLANNER_STRATEGY_FIT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "planner/plan/cluster.h"
#include "planner/plan/plan.h"
#include "planner/strategy/strategy.h"

namespace metaload {

struct Budgets {
  std::vector<uint64_t> per_rank_bytes;  // 0: the GPU's memory is unknown, no limit
  // Where the numbers come from, for messages: "--gpu-memory 80.00 GiB minus --reserve 10%", or
  // on the joined nodes "gpu_memory 80.00 GiB (node configs) minus --reserve 10%" (without the
  // size when the ranks' GPUs differ).
  std::string origin;
  Cluster::Origin cluster_origin = Cluster::Origin::kFlags;
};

// How a refusal asks for `gpus` ranks in `stages` pipeline stages (0: --pp was not given):
// `metactl plan`'s "--gpus 12 --pp 6"; on the joined nodes, whose load takes its world size from
// --world, WORLD_SIZE or the process group, "world size 12, --pp 6".
std::string MoreGpusFlags(const Budgets& budgets, int64_t gpus, int64_t stages);

struct Strategy;  // planner/strategy/strategy_registry.h

// "10%", "8.00 GiB": the reserve as the user gave it.
std::string ReserveToString(const StrategyOptions& options);

// The budget of each of `slots`. InvalidArgument when the reserve fraction is outside [0, 1)
// or the reserve leaves nothing of some node's GPUs.
absl::StatusOr<Budgets> RankBudgets(const Cluster& cluster, const std::vector<RankSlot>& slots,
                                    const StrategyOptions& options);

// Why a strategy's plan does not fit, before any alternative is tried.
struct NoFit {
  std::string what;  // which rank or unit overflows, and by how much
  // GPUs of the tightest budget on which this strategy fits, and the flags asking for them
  // ("--gpus 6", "--gpus 12 --pp 6"); 0 when more GPUs would not help.
  int64_t gpus_needed = 0;
  std::string gpus_flags;
};

// ResourceExhausted with no_fit.what, after storing `no_fit` in `out` (when not null).
absl::Status Overflow(NoFit no_fit, NoFit* out);

// The ranks a request plans for: its world size, or every GPU of the cluster.
int RequestedWorldSize(const PlanRequest& request);

// What every strategy's plan starts from: the ranks' places and budgets.
struct PlanSetup {
  int world_size = 0;
  std::vector<RankSlot> slots;
  Budgets budgets;
};

// The first rank of `plan` over its budget and by how much, `why` it holds that much, and that
// `gpus_needed` GPUs would fit (0: more would not help), as Overflow(..., no_fit); OK when every
// rank fits.
absl::Status CheckBudgets(const CompactPlan& plan, const Budgets& budgets, absl::string_view why,
                          int64_t gpus_needed, NoFit* no_fit);

// `strategy`'s plan without the advice: the setup and the whole items, its validate, its plan;
// on overflow Overflow(..., no_fit). Trying an alternative calls this, so that alternatives
// never try alternatives in turn.
absl::StatusOr<CompactPlan> PlanWithoutAdvice(const Strategy& strategy, const PlanRequest& request,
                                              NoFit* no_fit);

// `strategy`'s plan; when it overflows, ResourceExhausted "<what>; would fit: <alternatives>",
// each alternative (other than larger GPUs) one that was planned and fits.
absl::StatusOr<CompactPlan> PlanOrExplain(const PlanRequest& request, const Strategy& strategy);

// Whole units in order (bytes one rank holds of each), each part filled as full as it goes:
// the parts of `capacity` bytes needed, or 0 when a unit alone is larger.
int64_t PartsNeeded(absl::Span<const uint64_t> unit_bytes, uint64_t capacity);

// Why whole units in order found no partition over parts of `capacities`: the largest unit
// alone, else what is left over when each part is filled as full as it goes. `part` names a
// part ("GPU", "pipeline stage"); `per_rank` qualifies unit bytes ("", or " per rank at --tp 2",
// and then left-over bytes say " per rank"); `never_split` says who never splits a unit. Fills
// `what` only.
// REQUIRES: `unit_paths` and `unit_bytes` have the same non-zero size, `capacities` is
// non-empty, and no partition exists (PartitionContiguous returned nullopt); else `what` is empty.
NoFit UnitsNoFit(const std::vector<std::string>& unit_paths, const std::vector<uint64_t>& unit_bytes,
                 const std::vector<uint64_t>& capacities, const Budgets& budgets, absl::string_view part,
                 absl::string_view per_rank, absl::string_view never_split);

// The smallest non-zero budget; 0 when every budget is unknown.
uint64_t TightestBudget(absl::Span<const uint64_t> budgets_bytes);

}  // namespace metaload

#endif  // METALOAD_PLANNER_STRATEGY_FIT_H_
