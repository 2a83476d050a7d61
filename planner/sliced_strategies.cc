// The `replicate`, `fsdp` and `tp` strategies: every rank reads only the tensors, or the
// slices of tensors, it owns. Budgets here are the GPU's memory minus the reserve kept for
// activations and workspace.
#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "planner/partition.h"
#include "planner/slice.h"
#include "planner/status_macros.h"
#include "planner/strategy.h"
#include "planner/tp_rules.h"
#include "planner/units.h"

namespace metaload {
namespace {

// What every sliced strategy starts from: the ranks' slots and budgets and the whole-tensor
// items in skeleton order.
struct Setup {
  int world_size = 0;
  std::vector<RankSlot> slots;
  std::vector<uint64_t> budgets_bytes;  // per rank
  std::vector<ReadItem> items;
};

absl::StatusOr<Setup> Prepare(const PlanRequest& request) {
  if (request.skeleton == nullptr || request.cluster == nullptr) {
    return absl::InvalidArgumentError("a plan request needs a skeleton and a cluster");
  }
  if (!(request.options.reserve_fraction >= 0.0 && request.options.reserve_fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--reserve ", request.options.reserve_fraction, " must be a fraction in [0, 1) or a size"));
  }
  const Cluster& cluster = *request.cluster;
  Setup setup;
  setup.world_size = request.world_size == 0 ? cluster.total_gpus() : request.world_size;
  ML_ASSIGN_OR_RETURN(setup.slots, cluster.Slots(setup.world_size));
  for (const RankSlot& slot : setup.slots) {
    const NodeSpec& node = cluster.nodes[slot.node_index];
    const uint64_t reserve_bytes =
        request.options.reserve_bytes > 0
            ? request.options.reserve_bytes
            : static_cast<uint64_t>(static_cast<double>(node.gpu_memory_bytes) * request.options.reserve_fraction);
    if (node.gpu_memory_bytes > 0 && reserve_bytes >= node.gpu_memory_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("--reserve ", FormatBytes(reserve_bytes),
                                                     " leaves nothing of node ", node.name, "'s ",
                                                     FormatBytes(node.gpu_memory_bytes), " GPUs"));
    }
    // 0 stays "unknown, no limit", as in the layers strategy.
    setup.budgets_bytes.push_back(node.gpu_memory_bytes == 0 ? 0 : node.gpu_memory_bytes - reserve_bytes);
  }
  ML_ASSIGN_OR_RETURN(setup.items,
                      WholeTensorItems(*request.skeleton, request.checkpoint, request.allow_missing, request.options.load_dtype));
  return setup;
}

Plan EmptyPlan(const PlanRequest& request, const Setup& setup, absl::string_view strategy) {
  Plan plan;
  plan.model = request.skeleton->model;
  plan.strategy = std::string(strategy);
  plan.world_size = setup.world_size;
  plan.ranks.resize(setup.world_size);
  for (int r = 0; r < setup.world_size; ++r) {
    RankPlan& rank = plan.ranks[r];
    rank.rank = r;
    rank.node = request.cluster->nodes[setup.slots[r].node_index].name;
    rank.gpu = setup.slots[r].gpu_index;
    rank.budget_bytes = setup.budgets_bytes[r];
  }
  return plan;
}

// `whole` cut to [start, start + length) along `dim`; its offsets stay the whole tensor's (plan.h).
ReadItem SliceOf(const ReadItem& whole, int dim, int64_t start, int64_t length) {
  ReadItem item = whole;
  item.slice = TensorSlice{dim, start, length};
  item.size_bytes = SliceSizeBytes(item.shape, LoadDType(item), item.slice);
  return item;
}

void AddItem(ReadItem item, RankPlan* rank) {
  rank->size_bytes += item.size_bytes;
  rank->items.push_back(std::move(item));
}

// The first rank over its budget, by how much, and `advice` on what would fit.
absl::Status CheckBudgets(const Plan& plan, absl::string_view advice) {
  for (const RankPlan& rank : plan.ranks) {
    if (rank.budget_bytes == 0 || rank.size_bytes <= rank.budget_bytes) continue;
    return absl::ResourceExhaustedError(
        absl::StrCat("rank ", rank.rank, " (node ", rank.node, ", gpu ", rank.gpu, ") needs ",
                     FormatBytes(rank.size_bytes), " but its budget is ", FormatBytes(rank.budget_bytes),
                     " (--gpu-memory minus --reserve): ", FormatBytes(rank.size_bytes - rank.budget_bytes),
                     " over; ", advice));
  }
  return absl::OkStatus();
}

bool IsComputed(const ReadItem& item) { return !item.init.empty(); }

}  // namespace

absl::StatusOr<Plan> MakeReplicatePlan(const PlanRequest& request) {
  ML_ASSIGN_OR_RETURN(Setup setup, Prepare(request));
  Plan plan = EmptyPlan(request, setup, "replicate");
  plan.replicas = setup.world_size;
  for (RankPlan& rank : plan.ranks) {
    for (const ReadItem& item : setup.items) AddItem(item, &rank);
  }
  ML_RETURN_IF_ERROR(CheckBudgets(plan,
                                  "replicate holds the whole model on every GPU: use --strategy fsdp or "
                                  "tp, larger GPUs (--gpu-memory), or another --dtype"));
  return plan;
}

absl::StatusOr<Plan> MakeFsdpPlan(const PlanRequest& request) {
  ML_ASSIGN_OR_RETURN(Setup setup, Prepare(request));
  Plan plan = EmptyPlan(request, setup, "fsdp");
  plan.group_size = setup.world_size;
  const int64_t world = setup.world_size;
  for (const ReadItem& item : setup.items) {
    // Scalars, empty dims and computed buffers are not worth splitting: every rank holds them.
    if (item.shape.empty() || item.shape[0] == 0 || IsComputed(item)) {
      for (RankPlan& rank : plan.ranks) AddItem(item, &rank);
      continue;
    }
    const int64_t rows = item.shape[0];
    const int64_t chunk = rows / world + (rows % world != 0 ? 1 : 0);
    for (int64_t r = 0; r < world && r * chunk < rows; ++r) {
      AddItem(SliceOf(item, 0, r * chunk, std::min(chunk, rows - r * chunk)), &plan.ranks[r]);
    }
  }
  ML_RETURN_IF_ERROR(CheckBudgets(plan, absl::StrCat("fsdp spreads the model over all ", world,
                                                     " GPUs: use more GPUs (--gpus), larger ones "
                                                     "(--gpu-memory), or another --dtype")));
  return plan;
}

absl::StatusOr<Plan> MakeTpPlan(const PlanRequest& request) {
  ML_ASSIGN_OR_RETURN(Setup setup, Prepare(request));
  const Skeleton& skeleton = *request.skeleton;
  const Cluster& cluster = *request.cluster;
  const int world = setup.world_size;
  const int tp = request.options.tp;
  if (tp < 1 || world % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tp ", tp, " must be at least 1 and divide the world size ", world));
  }
  const int pp = request.options.pp == 0 ? world / tp : request.options.pp;
  if (pp < 1 || world % (tp * pp) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--tp ", tp, " x --pp ", pp,
                                                   " must divide the world size ", world,
                                                   " (the rest are data-parallel replicas)"));
  }
  for (int g = 0; g < world; g += tp) {
    const int node = setup.slots[g].node_index;
    if (setup.slots[g + tp - 1].node_index != node) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tp ", tp, ": ranks ", g, "..", g + tp - 1, " would span nodes ", cluster.nodes[node].name,
          " and ", cluster.nodes[setup.slots[g + tp - 1].node_index].name, " (node ",
          cluster.nodes[node].name, " has ", cluster.nodes[node].gpu_count,
          " GPUs); a tensor-parallel group stays inside one node"));
    }
  }

  // Each tensor's split dim, and what one rank of a group holds of it.
  const size_t n = setup.items.size();
  std::vector<int> split_dims(n, kTpReplicate);
  std::vector<uint64_t> rank_bytes(n);
  for (size_t i = 0; i < n; ++i) {
    const ReadItem& item = setup.items[i];
    if (tp > 1 && !IsComputed(item))
      split_dims[i] = TpSplitDim(skeleton.tp_rules, item.tensor, item.shape.size());
    // An empty tensor has nothing to split: every rank of the group holds its no bytes.
    if (split_dims[i] != kTpReplicate && item.shape[split_dims[i]] == 0) split_dims[i] = kTpReplicate;
    const int dim = split_dims[i];
    if (dim != kTpReplicate && item.shape[dim] % tp != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", item.tensor, " ", ShapeToString(item.shape), ": dim ", dim, " (", item.shape[dim],
          ") does not divide by --tp ", tp, " (no uneven tensor-parallel splits)"));
    }
    rank_bytes[i] = dim == kTpReplicate ? item.size_bytes : item.size_bytes / static_cast<uint64_t>(tp);
  }

  // Placement units in model order, sized by what one rank of a group holds.
  PlacementUnitIndex index(skeleton);
  absl::flat_hash_map<std::string, size_t> unit_by_path;
  std::vector<std::string> unit_paths;
  std::vector<uint64_t> unit_bytes;
  std::vector<std::vector<size_t>> unit_items;
  for (size_t i = 0; i < n; ++i) {
    auto [it, inserted] = unit_by_path.emplace(index.UnitOf(setup.items[i].tensor), unit_paths.size());
    if (inserted) {
      unit_paths.push_back(it->first);
      unit_bytes.push_back(0);
      unit_items.emplace_back();
    }
    if (AddOverflows(unit_bytes[it->second], rank_bytes[i], &unit_bytes[it->second])) {
      return absl::InvalidArgumentError(absl::StrCat("unit ", it->first, " is larger than 2^64 bytes"));
    }
    unit_items[it->second].push_back(i);
  }

  // A stage's capacity is its tightest rank's, over every replica.
  std::vector<uint64_t> capacities(pp, std::numeric_limits<uint64_t>::max());
  for (int r = 0; r < world; ++r) {
    const uint64_t budget = setup.budgets_bytes[r];
    uint64_t& capacity = capacities[(r / tp) % pp];
    if (budget > 0) capacity = std::min(capacity, budget);
  }
  std::optional<std::vector<size_t>> ends = PartitionContiguous(unit_bytes, capacities);
  if (!ends.has_value()) {
    const size_t largest = std::max_element(unit_bytes.begin(), unit_bytes.end()) - unit_bytes.begin();
    const uint64_t capacity = *std::min_element(capacities.begin(), capacities.end());
    uint64_t total_bytes = 0;
    for (uint64_t bytes : unit_bytes) {
      if (AddOverflows(total_bytes, bytes, &total_bytes)) total_bytes = std::numeric_limits<uint64_t>::max();
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "at --tp ", tp, " --pp ", pp, " one rank of each tensor-parallel group holds ",
        FormatBytes(total_bytes), " over ", pp, " stages (",
        FormatBytes(total_bytes / static_cast<uint64_t>(pp)), " each at best), but a GPU's budget is ",
        FormatBytes(capacity), " (--gpu-memory minus --reserve); the largest unit, ", unit_paths[largest],
        ", needs ", FormatBytes(unit_bytes[largest]), " per rank",
        unit_bytes[largest] > capacity
            ? absl::StrCat(" (", FormatBytes(unit_bytes[largest] - capacity), " over)")
            : std::string(),
        ": raise --tp, use more GPUs (--gpus, --pp), larger ones (--gpu-memory), or another --dtype"));
  }

  Plan plan = EmptyPlan(request, setup, "tp");
  plan.group_size = tp;
  plan.replicas = world / (tp * pp);
  for (int r = 0; r < world; ++r) {
    const int stage = (r / tp) % pp;
    const int64_t t = r % tp;
    RankPlan& rank = plan.ranks[r];
    std::vector<size_t> items;
    for (size_t u = stage == 0 ? 0 : (*ends)[stage - 1]; u < (*ends)[stage]; ++u) {
      rank.units.push_back(unit_paths[u]);
      items.insert(items.end(), unit_items[u].begin(), unit_items[u].end());
    }
    std::sort(items.begin(), items.end());  // model order, as in every plan
    rank.items.reserve(items.size());
    for (size_t i : items) {
      const ReadItem& whole = setup.items[i];
      const int dim = split_dims[i];
      if (dim == kTpReplicate) {
        AddItem(whole, &rank);
      } else {
        const int64_t length = whole.shape[dim] / tp;
        AddItem(SliceOf(whole, dim, t * length, length), &rank);
      }
    }
  }
  return plan;
}

}  // namespace metaload
