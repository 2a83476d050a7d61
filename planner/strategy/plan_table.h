// A plan as a table for people (docs/cli.md): a header line (model, strategy, ranks, bytes,
// the dtype converted to), then one row per rank: rank, node, gpu, bytes, % of budget, what it
// holds and its units (first … last, "-" for none). The strategy's record says its title and
// what a rank holds (planner/strategy/strategy_registry.h):
//
//   plan for llama: strategy tp (tp 4 × pp 1 × 4 replicas), 16 ranks, 59.84 GiB
//   rank  node   gpu     bytes  % budget  holds                                      units
//      0  node0    0  3.74 GiB      5.2%  replica 1/4, tp 1/4: 226 sliced, 67 whole  model.embed_tokens …
//      lm_head (36 units)
//
// A plan of a strategy this process does not know (plan JSON from elsewhere) gets the words
// every strategy starts from. Pure; thread-safe.
#ifndef METALOAD_PLANNER_STRATEGY_PLAN_TABLE_H_
#define METALOAD_PLANNER_STRATEGY_PLAN_TABLE_H_

#include <cstddef>
#include <string>

#include "planner/plan/plan.h"

namespace metaload {

std::string PlanToTable(const Plan& plan);

// What a rank holding `sliced` slices and `whole` whole tensors holds, when its strategy has
// no words of its own: "12 tensors", "3 sliced, 9 whole".
std::string DefaultHolds(size_t sliced, size_t whole);

}  // namespace metaload

#endif  // METALOAD_PLANNER_STRATEGY_PLAN_TABLE_H_
