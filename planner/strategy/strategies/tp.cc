// The `replicate`, `fsdp` and `tp` strategies: every rank reads only the tensors, or the
// slices of tensors, it owns. Budgets here are the GPU's memory minus the reserve kept for
// activations and workspace.
#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "planner/plan/slice.h"
#include "planner/strategy/fit.h"
#include "planner/strategy/strategies/partition.h"
#include "planner/strategy/strategies/tp_rules.h"
#include "planner/strategy/strategies/tp_split.h"
#include "planner/strategy/strategy.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

// What every sliced strategy starts from: the ranks' slots and budgets and the whole-tensor
// items in skeleton order.
struct Setup {
  int world_size = 0;
  std::vector<RankSlot> slots;
  Budgets budgets;
  std::vector<ReadItem> items;
};

absl::StatusOr<Setup> Prepare(const PlanRequest& request) {
  if (request.skeleton == nullptr || request.cluster == nullptr) {
    return absl::InvalidArgumentError("a plan request needs a skeleton and a cluster");
  }
  const Cluster& cluster = *request.cluster;
  Setup setup;
  setup.world_size = request.world_size == 0 ? cluster.total_gpus() : request.world_size;
  ML_ASSIGN_OR_RETURN(setup.slots, cluster.Slots(setup.world_size));
  ML_ASSIGN_OR_RETURN(setup.budgets, RankBudgets(cluster, setup.slots, request.options));
  ML_ASSIGN_OR_RETURN(setup.items, WholeTensorItems(*request.skeleton, request.checkpoint,
                                                    request.allow_missing, request.options.load_dtype));
  return setup;
}

// The plan's ranks with their places and budgets, no items yet; the whole items move in.
CompactPlan EmptyPlan(const PlanRequest& request, Setup& setup, absl::string_view strategy) {
  CompactPlan plan;
  plan.model = request.skeleton->model;
  plan.strategy = std::string(strategy);
  plan.world_size = setup.world_size;
  plan.items = std::move(setup.items);
  plan.ranks.resize(setup.world_size);
  for (int r = 0; r < setup.world_size; ++r) {
    CompactRank& rank = plan.ranks[r];
    rank.rank = r;
    rank.node = request.cluster->nodes[setup.slots[r].node_index].name;
    rank.gpu = setup.slots[r].gpu_index;
    rank.budget_bytes = setup.budgets.per_rank_bytes[r];
  }
  return plan;
}

// The first rank over its budget and by how much, `why` it holds that much, and the GPUs
// that would fit; OK when every rank fits.
absl::Status CheckBudgets(const CompactPlan& plan, const Budgets& budgets, absl::string_view why,
                          int64_t gpus_needed, NoFit* no_fit) {
  for (const CompactRank& rank : plan.ranks) {
    if (rank.budget_bytes == 0 || rank.size_bytes <= rank.budget_bytes) continue;
    NoFit overflow;
    overflow.what = absl::StrCat("rank ", rank.rank, " (node ", rank.node, ", gpu ", rank.gpu, ") needs ",
                                 FormatBytes(rank.size_bytes), " but its budget is ",
                                 FormatBytes(rank.budget_bytes), " (", budgets.origin,
                                 "): ", FormatBytes(rank.size_bytes - rank.budget_bytes), " over; ", why);
    overflow.gpus_needed = gpus_needed;
    overflow.gpus_flags = absl::StrCat("--gpus ", gpus_needed);
    return Overflow(std::move(overflow), no_fit);
  }
  return absl::OkStatus();
}

bool IsComputed(const ReadItem& item) { return !item.init.empty(); }

// Scalars, empty dims and computed buffers are not worth splitting: every fsdp rank holds them.
bool FsdpSplits(const ReadItem& item) {
  return !item.shape.empty() && item.shape[0] > 0 && !IsComputed(item);
}

// What fsdp's fullest rank, rank 0 (every chunk is full there), holds at `world` ranks;
// saturates at 2^64 - 1.
uint64_t FsdpRankZeroBytes(const std::vector<ReadItem>& items, int64_t world) {
  uint64_t total_bytes = 0;
  for (const ReadItem& item : items) {
    uint64_t bytes = item.size_bytes;
    if (FsdpSplits(item)) {
      const int64_t rows = item.shape[0];
      bytes = item.size_bytes / static_cast<uint64_t>(rows) *
              static_cast<uint64_t>(ChunkSlice(0, rows, world, 0).length);
    }
    if (AddOverflows(total_bytes, bytes, &total_bytes)) return std::numeric_limits<uint64_t>::max();
  }
  return total_bytes;
}

// The fewest ranks above `world` at which fsdp's fullest rank fits `budget_bytes`, 0 when no
// number does (what every rank holds whole is already too much). Rank 0's bytes never grow
// with the world, so a binary search finds it.
int64_t FsdpGpusNeeded(const std::vector<ReadItem>& items, int64_t world, uint64_t budget_bytes) {
  int64_t most_rows = 0;
  for (const ReadItem& item : items) {
    if (FsdpSplits(item)) most_rows = std::max(most_rows, item.shape[0]);
  }
  int64_t low = world + 1, high = std::max(most_rows, low);  // beyond most_rows nothing shrinks
  if (budget_bytes == 0 || FsdpRankZeroBytes(items, high) > budget_bytes) return 0;
  while (low < high) {
    const int64_t mid = low + (high - low) / 2;
    if (FsdpRankZeroBytes(items, mid) <= budget_bytes) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  return low;
}

}  // namespace

absl::StatusOr<CompactPlan> ReplicatePlan(const PlanRequest& request, NoFit* no_fit) {
  ML_ASSIGN_OR_RETURN(Setup setup, Prepare(request));
  CompactPlan plan = EmptyPlan(request, setup, "replicate");
  plan.replicas = setup.world_size;
  for (CompactRank& rank : plan.ranks) {
    for (size_t i = 0; i < plan.items.size(); ++i) plan.Add(rank, i);
  }
  ML_RETURN_IF_ERROR(CheckBudgets(plan, setup.budgets, "replicate holds the whole model on every GPU",
                                  /*gpus_needed=*/0, no_fit));
  return plan;
}

absl::StatusOr<CompactPlan> FsdpPlan(const PlanRequest& request, NoFit* no_fit) {
  ML_ASSIGN_OR_RETURN(Setup setup, Prepare(request));
  CompactPlan plan = EmptyPlan(request, setup, "fsdp");
  plan.group_size = setup.world_size;
  const int64_t world = setup.world_size;
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const ReadItem& item = plan.items[i];
    if (!FsdpSplits(item)) {
      for (CompactRank& rank : plan.ranks) plan.Add(rank, i);
      continue;
    }
    // Every rank gets its piece, empty past the end, as every rank of FSDP2 gets a local
    // tensor: the plan says what DTensor holds.
    for (int64_t r = 0; r < world; ++r) plan.Add(plan.ranks[r], i, ChunkSlice(0, item.shape[0], world, r));
  }
  ML_RETURN_IF_ERROR(
      CheckBudgets(plan, setup.budgets, absl::StrCat("fsdp spreads the model over all ", world, " GPUs"),
                   FsdpGpusNeeded(plan.items, world, TightestBudget(setup.budgets.per_rank_bytes)), no_fit));
  return plan;
}

namespace {

// A tensor-parallel group is `tp` consecutive ranks of one node.
absl::Status CheckGroupsInsideNodes(const Cluster& cluster, const std::vector<RankSlot>& slots, int world,
                                    int tp) {
  for (int g = 0; g < world; g += tp) {
    const int node = slots[g].node_index;
    if (slots[g + tp - 1].node_index != node) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tp ", tp, ": ranks ", g, "..", g + tp - 1, " would span nodes ", cluster.nodes[node].name,
          " and ", cluster.nodes[slots[g + tp - 1].node_index].name, " (node ", cluster.nodes[node].name,
          " has ", cluster.nodes[node].gpu_count, " GPUs); a tensor-parallel group stays inside one node"));
    }
  }
  return absl::OkStatus();
}

// Each tensor's split (whole heads on every rank: tp_split.h), and what the fullest rank of a
// group holds of it: piece 0, which an uneven split makes the longest (ChunkSlice), so that
// budgets hold for every rank.
struct TpSplits {
  std::vector<TensorSplit> splits;
  std::vector<uint64_t> rank_bytes;
};

absl::StatusOr<TpSplits> SplitEveryTensor(const Skeleton& skeleton, const std::vector<ReadItem>& items,
                                          int tp) {
  TpSplits out;
  out.splits.resize(items.size());
  out.rank_bytes.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const ReadItem& item = items[i];
    if (!IsComputed(item)) {
      ML_ASSIGN_OR_RETURN(out.splits[i], TpSplitFor(skeleton, item.tensor, item.shape, tp));
    }
    const TensorSplit& split = out.splits[i];
    out.rank_bytes[i] = split.dim == kTpReplicate
                            ? item.size_bytes
                            : SliceSizeBytes(item.shape, LoadDType(item),
                                             ChunkSlice(split.dim, item.shape[split.dim], split.parts, 0));
  }
  return out;
}

// Placement units in model order, sized by what the fullest rank of a group holds of them.
struct Units {
  std::vector<std::string> paths;
  std::vector<uint64_t> bytes;
  std::vector<std::vector<size_t>> items;
};

absl::StatusOr<Units> GroupIntoUnits(const Skeleton& skeleton, const std::vector<ReadItem>& items,
                                     const std::vector<uint64_t>& rank_bytes) {
  PlacementUnitIndex index(skeleton);
  absl::flat_hash_map<std::string, size_t> unit_by_path;
  Units units;
  uint64_t total_rank_bytes = 0;  // bounds every unit, and partitioning relies on it
  for (size_t i = 0; i < items.size(); ++i) {
    if (AddOverflows(total_rank_bytes, rank_bytes[i], &total_rank_bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the model is larger than 2^64 bytes (at tensor ", items[i].tensor, ")"));
    }
    auto [it, inserted] = unit_by_path.emplace(index.UnitOf(items[i].tensor), units.paths.size());
    if (inserted) {
      units.paths.push_back(it->first);
      units.bytes.push_back(0);
      units.items.emplace_back();
    }
    units.bytes[it->second] += rank_bytes[i];
    units.items[it->second].push_back(i);
  }
  return units;
}

// Where each pipeline stage's units end: contiguous, each stage within its tightest rank's
// budget over every replica; ResourceExhausted saying what would fit otherwise.
absl::StatusOr<std::vector<size_t>> CutIntoStages(const PlanRequest& request, const Setup& setup,
                                                  const Units& units, const TpShape& shape, NoFit* no_fit) {
  std::vector<uint64_t> capacities(shape.pp, std::numeric_limits<uint64_t>::max());
  for (int r = 0; r < setup.world_size; ++r) {
    const uint64_t budget = setup.budgets.per_rank_bytes[r];
    uint64_t& capacity = capacities[(r / shape.tp) % shape.pp];
    if (budget > 0) capacity = std::min(capacity, budget);
  }
  std::optional<std::vector<size_t>> ends = PartitionContiguous(units.bytes, capacities);
  if (ends.has_value()) return *std::move(ends);
  NoFit why = UnitsNoFit(units.paths, units.bytes, capacities, setup.budgets, "pipeline stage",
                         absl::StrCat(" per rank at --tp ", shape.tp), "a pipeline stage");
  const int64_t stages = PartsNeeded(units.bytes, TightestBudget(setup.budgets.per_rank_bytes));
  why.gpus_needed = stages * shape.tp * shape.replicas;
  why.gpus_flags = request.options.pp == 0 ? absl::StrCat("--gpus ", why.gpus_needed)
                                           : absl::StrCat("--gpus ", why.gpus_needed, " --pp ", stages);
  return Overflow(std::move(why), no_fit);
}

// Rank r holds the units of its stage, each tensor whole or its piece r % tp of the split.
void AssignStages(const Units& units, const std::vector<size_t>& ends, const TpSplits& splits,
                  const TpShape& shape, CompactPlan& plan) {
  for (int r = 0; r < plan.world_size; ++r) {
    const int stage = (r / shape.tp) % shape.pp;
    const int64_t t = r % shape.tp;
    CompactRank& rank = plan.ranks[r];
    std::vector<size_t> items;
    for (size_t u = stage == 0 ? 0 : ends[stage - 1]; u < ends[stage]; ++u) {
      rank.units.push_back(units.paths[u]);
      items.insert(items.end(), units.items[u].begin(), units.items[u].end());
    }
    std::sort(items.begin(), items.end());  // model order, as in every plan
    rank.refs.reserve(items.size());
    for (size_t i : items) {
      const TensorSplit& split = splits.splits[i];
      if (split.dim == kTpReplicate) {
        plan.Add(rank, i);
      } else {
        plan.Add(
            rank, i,
            ChunkSlice(split.dim, plan.items[i].shape[split.dim], split.parts, split.PieceOf(t, shape.tp)));
      }
    }
  }
}

}  // namespace

absl::StatusOr<CompactPlan> TpPlan(const PlanRequest& request, NoFit* no_fit) {
  ML_ASSIGN_OR_RETURN(Setup setup, Prepare(request));
  ML_ASSIGN_OR_RETURN(const TpShape shape, ResolveTpShape(request.options, setup.world_size));
  ML_RETURN_IF_ERROR(CheckGroupsInsideNodes(*request.cluster, setup.slots, setup.world_size, shape.tp));
  ML_ASSIGN_OR_RETURN(TpSplits splits, SplitEveryTensor(*request.skeleton, setup.items, shape.tp));
  ML_ASSIGN_OR_RETURN(Units units, GroupIntoUnits(*request.skeleton, setup.items, splits.rank_bytes));
  ML_ASSIGN_OR_RETURN(std::vector<size_t> ends, CutIntoStages(request, setup, units, shape, no_fit));
  CompactPlan plan = EmptyPlan(request, setup, "tp");
  plan.group_size = shape.tp;
  plan.replicas = shape.replicas;
  AssignStages(units, ends, splits, shape, plan);
  return plan;
}

absl::StatusOr<Plan> MakeReplicatePlan(const PlanRequest& request) {
  ML_ASSIGN_OR_RETURN(CompactPlan plan, PlanOrExplain(request, &ReplicatePlan));
  return plan.Expand();
}
absl::StatusOr<Plan> MakeFsdpPlan(const PlanRequest& request) {
  ML_ASSIGN_OR_RETURN(CompactPlan plan, PlanOrExplain(request, &FsdpPlan));
  return plan.Expand();
}
absl::StatusOr<Plan> MakeTpPlan(const PlanRequest& request) {
  ML_ASSIGN_OR_RETURN(CompactPlan plan, PlanOrExplain(request, &TpPlan));
  return plan.Expand();
}

}  // namespace metaload
