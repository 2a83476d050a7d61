// The flags that choose how a model is split, shared by `metactl plan` (offline and
// --daemon) and `metactl load`, so that the plan a user previews is the plan ranks load.
//
//   AddStrategyFlags(&args);
//   ...
//   ML_ASSIGN_OR_RETURN(StrategyOptions options, ParseStrategyFlags(args));
#ifndef METALOAD_PLANNER_STRATEGY_STRATEGY_FLAGS_H_
#define METALOAD_PLANNER_STRATEGY_STRATEGY_FLAGS_H_

#include "absl/status/statusor.h"
#include "planner/strategy/strategy.h"
#include "util/cli_args.h"

namespace metaload {

// --strategy (its help lists every registered strategy), each strategy's own flags (--tp,
// --pp: the records' StrategyFlag), --reserve, --dtype.
void AddStrategyFlags(CliArgs* args);
// InvalidArgument naming the flag: a dtype other than bf16/fp16/fp32, a strategy's own flag
// (--tp, --pp) out of range or given with another strategy, a --reserve that is neither a fraction below 1, a
// percentage below 100 nor a size. (MakePlan refuses an unknown strategy, listing the known.)
absl::StatusOr<StrategyOptions> ParseStrategyFlags(const CliArgs& args);

// "10%", "0.1" (fractions of each GPU's memory) or "8GiB" (a size) into `options`.
absl::Status ParseReserve(const std::string& text, StrategyOptions* options);

}  // namespace metaload

#endif  // METALOAD_PLANNER_STRATEGY_STRATEGY_FLAGS_H_
