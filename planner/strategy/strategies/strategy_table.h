// The built-in strategies: the one table that lists them, one line each, in the order `--help`
// and "supported:" name them (which one is the default, StrategyOptions says). Each line names
// the record (planner/strategy/strategy_registry.h) that the strategy's own file in this folder
// defines:
//
//   const Strategy kFsdpStrategy = ...;  // fsdp.cc
//
// A new strategy is that file and its line here: the build compiles every .cc in this folder.
// (A macro, so that the one line both declares the record and puts it in the table.)
#ifndef METALOAD_PLANNER_STRATEGY_STRATEGIES_STRATEGY_TABLE_H_
#define METALOAD_PLANNER_STRATEGY_STRATEGIES_STRATEGY_TABLE_H_

#include "planner/strategy/strategy_registry.h"

#define METALOAD_BUILT_IN_STRATEGIES(X) \
  X(kLayersStrategy)                    \
  X(kTpStrategy)                        \
  X(kFsdpStrategy)                      \
  X(kReplicateStrategy)

namespace metaload {

#define METALOAD_DECLARE_STRATEGY(record) extern const Strategy record;
METALOAD_BUILT_IN_STRATEGIES(METALOAD_DECLARE_STRATEGY)
#undef METALOAD_DECLARE_STRATEGY

}  // namespace metaload

#endif  // METALOAD_PLANNER_STRATEGY_STRATEGIES_STRATEGY_TABLE_H_
