// The `tp` strategy: groups of `tp` consecutive ranks inside a node split tensors by
// planner/strategy/strategies/tp_rules.h, attention projections on head boundaries
// (tp_split.h: key/value heads replicated when tp exceeds them); pipeline stages of whole
// placement units across groups, balanced by bytes of the fullest rank of a group;
// data-parallel replicas repeat the same slices. A split dimension that does not divide by tp
// splits unevenly, as DTensor's Shard(dim) does (ChunkSlice); a split that would not give each
// rank whole heads is InvalidArgument naming the tensor. InvalidArgument, before anything is
// allocated, unless tp and pp are in [1, world] (pp 0: world / tp) and tp x pp divides the world.
#include "planner/strategy/strategies/tp.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "planner/plan/slice.h"
#include "planner/strategy/fit.h"
#include "planner/strategy/strategies/partition.h"
#include "planner/strategy/strategies/strategy_table.h"
#include "planner/strategy/strategies/tp_rules.h"
#include "planner/strategy/strategies/tp_split.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

// Far beyond any real node or cluster. Not small enough to multiply (2^16 x 2^16 is past an
// int): ResolveTpShape bounds both by the world size and multiplies in 64 bits.
constexpr int64_t kMaxParallel = 1 << 16;

constexpr StrategyFlag kTpFlags[] = {
    {"tp", "T", "with --strategy tp: ranks per tensor-parallel group, inside one\nnode (default 1)",
     &StrategyOptions::tp, 1, kMaxParallel},
    {"pp", "P",
     "with --strategy tp: pipeline stages (default world / T: no\n"
     "data-parallel replicas; --pp 1 makes world / T replicas)",
     &StrategyOptions::pp, 1, kMaxParallel},
};

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
    if (item.init.empty()) {  // a computed buffer is whole on every rank
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
absl::StatusOr<std::vector<size_t>> CutIntoStages(const PlanRequest& request, const PlanSetup& setup,
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
  why.gpus_flags = MoreGpusFlags(setup.budgets, why.gpus_needed, request.options.pp == 0 ? 0 : stages);
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

absl::Status PlanTp(const PlanRequest& request, const PlanSetup& setup, CompactPlan* plan, NoFit* no_fit) {
  ML_ASSIGN_OR_RETURN(const TpShape shape, ResolveTpShape(request.options, setup.world_size));
  ML_RETURN_IF_ERROR(CheckGroupsInsideNodes(*request.cluster, setup.slots, setup.world_size, shape.tp));
  ML_ASSIGN_OR_RETURN(TpSplits splits, SplitEveryTensor(*request.skeleton, plan->items, shape.tp));
  ML_ASSIGN_OR_RETURN(Units units, GroupIntoUnits(*request.skeleton, plan->items, splits.rank_bytes));
  ML_ASSIGN_OR_RETURN(std::vector<size_t> ends, CutIntoStages(request, setup, units, shape, no_fit));
  plan->group_size = shape.tp;
  plan->replicas = shape.replicas;
  AssignStages(units, ends, splits, shape, *plan);
  return absl::OkStatus();
}

absl::Status ValidateTp(const StrategyOptions& options, int world_size) {
  return ResolveTpShape(options, world_size).status();
}

// Larger groups on the same GPUs, keeping the replicas (and scaling --pp when it was given).
void TpWouldFit(const PlanRequest& request, const NoFit& no_fit, std::vector<std::string>* fits) {
  absl::StatusOr<TpShape> shape = ResolveTpShape(request.options, RequestedWorldSize(request));
  if (!shape.ok()) return;
  TpRetry retry;
  retry.first_tp = shape->tp + 1;
  retry.replicas = shape->replicas;
  retry.switch_strategy = false;
  retry.pp = request.options.pp != 0 ? TpRetry::Pp::kScaled : TpRetry::Pp::kKeep;
  if (std::optional<std::string> tp = SmallestTpThatFits(request, retry, no_fit.gpus_needed > 0)) {
    fits->push_back(*std::move(tp));
  }
}

// "tp 2 x pp 1"; "tp 2" when pp is world / tp.
std::string TpLabel(const StrategyOptions& options) {
  return absl::StrCat("tp ", options.tp, options.pp > 0 ? absl::StrCat(" x pp ", options.pp) : "");
}

// Pipeline stages of a tp plan: what is left of the world after groups and replicas.
// REQUIRES: group_size and replicas at least 1 (64 bits: a hand-built plan's product may not fit an int).
int StagesOf(const Plan& plan) {
  return static_cast<int>(std::max<int64_t>(1, plan.world_size / (int64_t{plan.group_size} * plan.replicas)));
}

// "tp (tp 2 × pp 4 × 2 replicas)".
std::string TpTableTitle(const Plan& plan) {
  return absl::StrCat(plan.strategy, " (tp ", plan.group_size, " \xC3\x97 pp ", StagesOf(plan),
                      plan.replicas > 1 ? absl::StrCat(" \xC3\x97 ", plan.replicas, " replicas") : "", ")");
}

// "replica 2/3, stage 1/2, tp 2/4: 118 sliced, 9 whole" (replica and stage when there are several).
std::string TpHolds(const Plan& plan, const RankPlan& rank, size_t sliced, size_t whole) {
  const int group = plan.group_size, stages = StagesOf(plan);
  std::string where;
  if (plan.replicas > 1)
    absl::StrAppend(&where, "replica ", rank.rank / (int64_t{group} * stages) + 1, "/", plan.replicas, ", ");
  if (stages > 1) absl::StrAppend(&where, "stage ", (rank.rank / group) % stages + 1, "/", stages, ", ");
  return absl::StrCat(where, "tp ", rank.rank % group + 1, "/", group, ": ", sliced, " sliced, ", whole,
                      " whole");
}

}  // namespace

absl::StatusOr<TpShape> ResolveTpShape(const StrategyOptions& options, int world) {
  const int tp = options.tp;
  if (tp < 1 || tp > world || world % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tp ", tp, " must be at least 1 and divide the world size ", world));
  }
  if (options.pp < 0 || options.pp > world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pp ", options.pp, " must be between 1 and the world size ", world, " (or 0: world size / --tp)"));
  }
  const int pp = options.pp == 0 ? world / tp : options.pp;
  const int64_t group_ranks = int64_t{tp} * pp;  // tp, pp <= world < 2^31: fits in 64 bits
  if (world % group_ranks != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--tp ", tp, " x --pp ", pp,
                                                   " must divide the world size ", world,
                                                   " (the rest are data-parallel replicas)"));
  }
  return TpShape{tp, pp, static_cast<int>(world / group_ranks)};
}

std::optional<std::string> SmallestTpThatFits(const PlanRequest& request, const TpRetry& retry,
                                              bool more_gpus_help) {
  const int world = RequestedWorldSize(request);
  int largest_node = 0;
  for (const NodeSpec& node : request.cluster->nodes) largest_node = std::max(largest_node, node.gpu_count);
  std::optional<std::string> on_more_gpus;
  for (int tp = retry.first_tp; tp <= std::min(largest_node, world); ++tp) {
    const int64_t group_ranks = int64_t{tp} * retry.replicas;  // both at most world: no overflow
    if (world % group_ranks != 0) continue;
    PlanRequest alternative = request;
    alternative.options.strategy = std::string(kTpStrategy.name);
    alternative.options.tp = tp;
    std::string flags = absl::StrCat(
        retry.switch_strategy ? absl::StrCat("--strategy ", kTpStrategy.name, " ") : "", "--tp ", tp);
    std::string pp_flag;  // on the same GPUs only: with more GPUs, the count's flags say --pp
    if (retry.pp == TpRetry::Pp::kOne) {
      alternative.options.pp = 1;
      pp_flag = " --pp 1";
    } else if (retry.pp == TpRetry::Pp::kScaled) {
      alternative.options.pp = static_cast<int>(world / group_ranks);
      pp_flag = absl::StrCat(" --pp ", alternative.options.pp);
    }
    NoFit no_fit;
    if (PlanWithoutAdvice(kTpStrategy, alternative, &no_fit).ok()) return flags + pp_flag;
    if (!more_gpus_help && !on_more_gpus.has_value() && no_fit.gpus_needed > 0 && retry.offer_more_gpus) {
      on_more_gpus = absl::StrCat(flags, " on ", no_fit.gpus_needed, " GPUs (", no_fit.gpus_flags, ")");
    }
  }
  return on_more_gpus;
}

const Strategy kTpStrategy = [] {
  Strategy s("tp",
             "tensor-parallel groups of --tp ranks, --pp pipeline stages, the rest data-parallel replicas",
             &PlanTp);
  s.flags = kTpFlags;
  s.validate = &ValidateTp;
  s.would_fit = &TpWouldFit;
  s.label = &TpLabel;
  s.table_title = &TpTableTitle;
  s.holds = &TpHolds;
  return s;
}();

}  // namespace metaload
