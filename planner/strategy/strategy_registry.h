// Strategies as registered records: everything the planner, the flags, the plan table, the
// device map and the labels need to know about a strategy is one `Strategy`, found by its name.
// The built-in ones are listed in planner/strategy/strategies/strategy_table.h (one line each,
// each record a constant of its own file there); tests add toys with RegisterStrategy.
//
//   const Strategy* strategy = FindStrategy(options.strategy);
//   if (strategy == nullptr) ...unknown: StrategyNames() says which are known...;
//
// A name is the only string a strategy has, and it exists at the edges (flags, plan JSON,
// GetPlanRequest): inside, code asks the record, never compares names with literals.
//
// Thread-safety: every function here is safe to call from any thread; records are immutable.
#ifndef METALOAD_PLANNER_STRATEGY_STRATEGY_REGISTRY_H_
#define METALOAD_PLANNER_STRATEGY_STRATEGY_REGISTRY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "planner/plan/plan.h"
#include "planner/strategy/fit.h"
#include "planner/strategy/strategy.h"

namespace metaload {

// An option only one strategy takes (`--tp` belongs to tp), typed: an integer in a field of
// StrategyOptions, whose default (StrategyOptions{}) holds when the flag is absent.
struct StrategyFlag {
  absl::string_view name;        // the flag without "--", and its key in StrategyOptionsKey
  absl::string_view value_name;  // for --help: "T"
  absl::string_view help;        // for --help: lines of at most ~70 characters
  int StrategyOptions::*field = nullptr;
  int64_t min = 1;  // bounds of a value the user gives
  int64_t max = 1;
};

// Strategy::not_a_device_map of most strategies, and of a plan whose strategy is unknown.
inline constexpr absl::string_view kSplitsTensorsAcrossRanks = "splits tensors across ranks";

// One strategy. Function fields left null take the default their comment names. A record is
// a constant of its strategy's file:
//
//   const Strategy kFsdpStrategy = [] {
//     Strategy s("fsdp", "every tensor split on dim 0 over all ranks, like FSDP2", &PlanFsdp);
//     s.holds = &FsdpHolds;
//     return s;
//   }();
struct Strategy {
  // Gives `plan` (its ranks placed and budgeted, the whole items in skeleton order, no
  // references yet) every rank's references. When a rank or a unit does not fit: return
  // Overflow(why, no_fit) (planner/strategy/fit.h), and PlanOrExplain adds what would fit.
  using PlanFn = absl::Status (*)(const PlanRequest& request, const PlanSetup& setup, CompactPlan* plan,
                                  NoFit* no_fit);

  constexpr Strategy(absl::string_view name, absl::string_view summary, PlanFn plan)
      : name(name), summary(summary), plan(plan) {}

  absl::string_view name;  // "tp": what --strategy, plan JSON and GetPlanRequest say
  // What it does, for --strategy's help ("every rank holds everything"); wrapped there.
  absl::string_view summary;
  PlanFn plan = nullptr;                 // REQUIRED
  absl::Span<const StrategyFlag> flags;  // the options only it takes, in --help's order

  // InvalidArgument when the options cannot make a plan of `world_size` ranks, checked once
  // the cluster's slots and budgets and the items are known, before `plan`. Null: any can.
  absl::Status (*validate)(const StrategyOptions& options, int world_size) = nullptr;
  // The alternatives that would fit when its plan does not, each one planned and found to fit,
  // appended to `fits` in the order a refusal lists them (after the GPUs the plan needs and
  // before --dtype; "--strategy tp --tp 2"). Null: none.
  void (*would_fit)(const PlanRequest& request, const NoFit& no_fit,
                    std::vector<std::string>* fits) = nullptr;

  // Words for what a load ran with, before ", 4 ranks" (PlanLabel): "tp 2 x pp 1". Null: the name.
  std::string (*label)(const StrategyOptions& options) = nullptr;
  // The plan table's title after "strategy ": "tp (tp 2 × pp 4 × 2 replicas)". Null: the name.
  std::string (*table_title)(const Plan& plan) = nullptr;
  // The plan table's "holds" cell for `rank`, which holds `sliced` slices and `whole` whole
  // tensors. Null: DefaultHolds (planner/strategy/plan_table.h).
  std::string (*holds)(const Plan& plan, const RankPlan& rank, size_t sliced, size_t whole) = nullptr;
  // Why transformers' device_map (one device per whole module) cannot say its plans, after
  // "a <name> plan "; empty when it can (`--format hf-device-map` accepts it).
  absl::string_view not_a_device_map = kSplitsTensorsAcrossRanks;
};

// The strategy named `name`; nullptr when none is.
const Strategy* FindStrategy(absl::string_view name);

// Every strategy: the built-in ones in table order, then those registered, in their order.
std::vector<const Strategy*> Strategies();

// "layers, tp, fsdp, replicate": Strategies()' names, for "supported:" messages.
std::string StrategyNames();

// Adds a strategy after the built-in ones (tests register toys this way: a strategy of the
// product is a line in strategies/strategy_table.h). AlreadyExists when its name, or one of
// its flags, is another strategy's; InvalidArgument without a name or a `plan`.
// REQUIRES: `record` outlives every later use of the registry (a static).
absl::Status RegisterStrategy(const Strategy& record);

}  // namespace metaload

#endif  // METALOAD_PLANNER_STRATEGY_STRATEGY_REGISTRY_H_
