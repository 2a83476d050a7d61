// The `layers` strategy: whole placement units (no-split modules, else parent modules) in
// model order, cut into one contiguous run per rank so that the fullest rank holds as
// little as possible. Like Accelerate's device_map="auto", but balanced across a cluster.
#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "planner/partition.h"
#include "planner/status_macros.h"
#include "planner/strategy.h"
#include "planner/units.h"

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

// Why no partition exists, from the most specific cause to the most general.
// REQUIRES: `units` and `capacities` are non-empty (no units always fit).
absl::Status NoFitError(const std::vector<Unit>& units, const std::vector<uint64_t>& capacities) {
  const uint64_t largest_capacity = *std::max_element(capacities.begin(), capacities.end());
  const uint64_t smallest_capacity = *std::min_element(capacities.begin(), capacities.end());
  const Unit* largest = &units.front();
  uint64_t total_bytes = 0, capacity_bytes = 0;
  for (const Unit& unit : units) {
    if (unit.size_bytes > largest->size_bytes) largest = &unit;
    total_bytes += unit.size_bytes;  // GroupIntoUnits checked that the total fits
  }
  if (largest->size_bytes > largest_capacity) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "unit ", largest->path, " needs ", FormatBytes(largest->size_bytes), " but ",
        smallest_capacity == largest_capacity ? "a GPU has " : "the largest GPU has ",
        FormatBytes(largest_capacity), " (--gpu-memory), and the layers strategy never splits a unit"));
  }
  for (uint64_t capacity : capacities) {
    if (AddOverflows(capacity_bytes, capacity, &capacity_bytes)) {
      capacity_bytes = std::numeric_limits<uint64_t>::max();  // some budget is unknown (no limit)
    }
  }
  if (total_bytes > capacity_bytes) {
    const uint64_t gpus_needed =
        total_bytes / largest_capacity + (total_bytes % largest_capacity != 0 ? 1 : 0);
    return absl::ResourceExhaustedError(
        absl::StrCat("the model needs ", FormatBytes(total_bytes), " but ", capacities.size(), " GPUs hold ",
                     FormatBytes(capacity_bytes), ": use at least ", gpus_needed,
                     " GPUs (--gpus) or larger ones (--gpu-memory)"));
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("the model (", FormatBytes(total_bytes), ") fits in the ", capacities.size(), " GPUs' ",
                   FormatBytes(capacity_bytes),
                   " only if units were split; whole units in order (the largest, ", largest->path, ", is ",
                   FormatBytes(largest->size_bytes), ") leave too much unused: use more GPUs (--gpus)"));
}

}  // namespace

absl::StatusOr<Plan> MakeLayersPlan(const PlanRequest& request) {
  if (request.skeleton == nullptr || request.cluster == nullptr) {
    return absl::InvalidArgumentError("a plan request needs a skeleton and a cluster");
  }
  const Skeleton& skeleton = *request.skeleton;
  const Cluster& cluster = *request.cluster;
  const int world_size = request.world_size == 0 ? cluster.total_gpus() : request.world_size;
  ML_ASSIGN_OR_RETURN(std::vector<RankSlot> slots, cluster.Slots(world_size));
  ML_ASSIGN_OR_RETURN(std::vector<ReadItem> items, WholeTensorItems(skeleton, request.checkpoint, request.allow_missing, request.options.load_dtype));
  ML_ASSIGN_OR_RETURN(std::vector<Unit> units, GroupIntoUnits(skeleton, items));

  std::vector<uint64_t> unit_bytes, capacities;
  for (const Unit& unit : units) unit_bytes.push_back(unit.size_bytes);
  for (const RankSlot& slot : slots)
    capacities.push_back(CapacityOf(cluster.nodes[slot.node_index].gpu_memory_bytes));
  std::optional<std::vector<size_t>> ends = PartitionContiguous(unit_bytes, capacities);
  if (!ends.has_value()) return NoFitError(units, capacities);

  Plan plan;
  plan.model = skeleton.model;
  plan.strategy = "layers";
  plan.world_size = world_size;
  plan.ranks.resize(world_size);
  size_t begin = 0;
  for (int r = 0; r < world_size; ++r) {
    const NodeSpec& node = cluster.nodes[slots[r].node_index];
    RankPlan& rank = plan.ranks[r];
    rank.rank = r;
    rank.node = node.name;
    rank.gpu = slots[r].gpu_index;
    rank.budget_bytes = node.gpu_memory_bytes;
    std::vector<size_t> rank_items;
    for (size_t u = begin; u < (*ends)[r]; ++u) {
      rank.units.push_back(units[u].path);
      rank.size_bytes += units[u].size_bytes;
      rank_items.insert(rank_items.end(), units[u].items.begin(), units[u].items.end());
    }
    // A unit's tensors need not be adjacent in the skeleton; items follow model order.
    std::sort(rank_items.begin(), rank_items.end());
    for (size_t i : rank_items) rank.items.push_back(std::move(items[i]));
    begin = (*ends)[r];
  }
  return plan;
}

}  // namespace metaload
