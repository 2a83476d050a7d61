// The `tp` strategy's shape, and the tp plans other strategies offer when theirs does not fit
// ("would fit: --strategy tp --tp 2"). Internal to planner/strategy/.
//
//   ML_ASSIGN_OR_RETURN(TpShape shape, ResolveTpShape(request.options, world));
#ifndef METALOAD_PLANNER_STRATEGY_STRATEGIES_TP_H_
#define METALOAD_PLANNER_STRATEGY_STRATEGIES_TP_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "planner/strategy/strategy.h"

namespace metaload {

// How a plan that does not fit is retried as tp plans of growing groups on the same GPUs.
struct TpRetry {
  int first_tp = 2;  // the smallest group size tried
  int replicas = 1;  // data-parallel replicas every alternative keeps
  // The flags start "--strategy tp " (false: the request is tp already).
  bool switch_strategy = true;
  // --pp of the alternatives: the request's (unsaid), 1 (whole-model groups, " --pp 1"), or
  // what the same GPUs leave (" --pp N": the request said --pp).
  enum class Pp { kKeep, kOne, kScaled };
  Pp pp = Pp::kKeep;
  // When no group size fits these GPUs and more GPUs would not help the request's own
  // strategy, offer the smallest group size that fits more GPUs, with their count.
  bool offer_more_gpus = true;
};

// The tp plan with the smallest group size (from retry.first_tp, at most a node's GPUs) that
// fits, as flags ("--strategy tp --tp 4 --pp 1"); else, as TpRetry says, one on more GPUs
// ("--tp 4 on 16 GPUs (--gpus 16 --pp 4)"); nullopt when none does. `more_gpus_help`: the
// request's own strategy fits on more GPUs (then that count is offered, not this).
std::optional<std::string> SmallestTpThatFits(const PlanRequest& request, const TpRetry& retry,
                                              bool more_gpus_help);

// The `tp` strategy's shape at `world` ranks: groups of `tp` ranks, `pp` pipeline stages
// (options.pp 0: world / tp), and the data-parallel `replicas` that make up the rest.
struct TpShape {
  int tp = 1;
  int pp = 1;
  int replicas = 1;
};

// InvalidArgument unless tp and pp are in [1, world] and tp x pp divides world. The options
// come from flags and requests: they are bounded before any product, and the product is taken
// in 64 bits, so no value overflows into a false divisor or a huge allocation.
// REQUIRES: world >= 1.
absl::StatusOr<TpShape> ResolveTpShape(const StrategyOptions& options, int world);

}  // namespace metaload

#endif  // METALOAD_PLANNER_STRATEGY_STRATEGIES_TP_H_
