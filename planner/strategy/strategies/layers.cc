// The `layers` strategy: whole placement units (no-split modules, else parent modules) in
// model order, cut into one contiguous run per rank so that the fullest rank holds as
// little as possible, each within its budget (GPU memory minus --reserve). Like Accelerate's
// device_map="auto", but balanced across a cluster; a no-split module is never split, tied
// tensors share a rank. The one strategy transformers' device_map can say.
#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "planner/strategy/fit.h"
#include "planner/strategy/strategies/partition.h"
#include "planner/strategy/strategies/strategy_table.h"
#include "planner/strategy/strategies/tp.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

struct Unit {
  std::string path;
  uint64_t size_bytes = 0;
  std::vector<size_t> items;  // indexes into the skeleton-ordered item list
};

// Units in order of their first tensor in the skeleton. A tied alias is no tensor, so a
// unit made only of aliases never appears: its storage lives with the stored tensor.
absl::StatusOr<std::vector<Unit>> GroupIntoUnits(const Skeleton& skeleton,
                                                 const std::vector<ReadItem>& items) {
  PlacementUnitIndex index(skeleton);
  absl::flat_hash_map<std::string, size_t> unit_by_path;
  std::vector<Unit> units;
  uint64_t total_bytes = 0;
  for (size_t i = 0; i < skeleton.tensors.size(); ++i) {
    // Checking the total bounds every unit too, and partitioning relies on it.
    if (AddOverflows(total_bytes, items[i].size_bytes, &total_bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the model is larger than 2^64 bytes (at tensor ", items[i].tensor, ")"));
    }
    std::string path = index.UnitOf(skeleton.tensors[i].name);
    auto [it, inserted] = unit_by_path.emplace(path, units.size());
    if (inserted) units.push_back(Unit{std::move(path), 0, {}});
    units[it->second].size_bytes += items[i].size_bytes;
    units[it->second].items.push_back(i);
  }
  return units;
}

// Capacity 0 means "unknown": no limit.
uint64_t CapacityOf(uint64_t budget_bytes) {
  return budget_bytes == 0 ? std::numeric_limits<uint64_t>::max() : budget_bytes;
}

absl::Status PlanLayers(const PlanRequest& request, const PlanSetup& setup, CompactPlan* plan,
                        NoFit* no_fit) {
  ML_ASSIGN_OR_RETURN(std::vector<Unit> units, GroupIntoUnits(*request.skeleton, plan->items));
  std::vector<std::string> unit_paths;
  std::vector<uint64_t> unit_bytes, capacities;
  for (const Unit& unit : units) {
    unit_paths.push_back(unit.path);
    unit_bytes.push_back(unit.size_bytes);
  }
  for (uint64_t budget : setup.budgets.per_rank_bytes) capacities.push_back(CapacityOf(budget));
  std::optional<std::vector<size_t>> ends = PartitionContiguous(unit_bytes, capacities);
  if (!ends.has_value()) {
    NoFit why =
        UnitsNoFit(unit_paths, unit_bytes, capacities, setup.budgets, "GPU", "", "the layers strategy");
    why.gpus_needed = PartsNeeded(unit_bytes, TightestBudget(setup.budgets.per_rank_bytes));
    why.gpus_flags = MoreGpusFlags(setup.budgets, why.gpus_needed, 0);
    return Overflow(std::move(why), no_fit);
  }
  size_t begin = 0;
  for (CompactRank& rank : plan->ranks) {
    std::vector<size_t> rank_items;
    for (size_t u = begin; u < (*ends)[rank.rank]; ++u) {
      rank.units.push_back(units[u].path);
      rank_items.insert(rank_items.end(), units[u].items.begin(), units[u].items.end());
    }
    // A unit's tensors need not be adjacent in the skeleton; items follow model order.
    std::sort(rank_items.begin(), rank_items.end());
    for (size_t i : rank_items) plan->Add(rank, i);
    begin = (*ends)[rank.rank];
  }
  return absl::OkStatus();
}

// Layers that do not fit: the same GPUs as tp groups.
void LayersWouldFit(const PlanRequest& request, const NoFit& no_fit, std::vector<std::string>* fits) {
  if (std::optional<std::string> tp = SmallestTpThatFits(request, TpRetry{}, no_fit.gpus_needed > 0)) {
    fits->push_back(*std::move(tp));
  }
}

}  // namespace

const Strategy kLayersStrategy = [] {
  Strategy s("layers", "whole blocks in order, balanced by bytes", &PlanLayers);
  s.would_fit = &LayersWouldFit;
  s.not_a_device_map = "";  // whole modules, each on one GPU: what a device_map says
  return s;
}();

}  // namespace metaload
