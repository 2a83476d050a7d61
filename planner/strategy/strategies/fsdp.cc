// The `fsdp` strategy, like FSDP2's Shard(0): every tensor with a dim split on dim 0 across all
// ranks in chunks of ceil(dim0 / world) (ChunkSlice, planner/plan/slice.h), the last ranks
// holding less and those past the end an empty slice (0 bytes), so every rank has an item for
// every tensor as every FSDP2 rank has a local tensor; scalars and non-persistent buffers on
// every rank.
#include <algorithm>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "planner/plan/slice.h"
#include "planner/strategy/fit.h"
#include "planner/strategy/strategies/strategy_table.h"
#include "util/units.h"

namespace metaload {
namespace {

// Scalars, empty dims and computed buffers are not worth splitting: every fsdp rank holds them.
bool FsdpSplits(const ReadItem& item) {
  return !item.shape.empty() && item.shape[0] > 0 && item.init.empty();
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

absl::Status PlanFsdp(const PlanRequest& request, const PlanSetup& setup, CompactPlan* plan, NoFit* no_fit) {
  plan->group_size = setup.world_size;
  const int64_t world = setup.world_size;
  for (size_t i = 0; i < plan->items.size(); ++i) {
    const ReadItem& item = plan->items[i];
    if (!FsdpSplits(item)) {
      for (CompactRank& rank : plan->ranks) plan->Add(rank, i);
      continue;
    }
    // Every rank gets its piece, empty past the end, as every rank of FSDP2 gets a local
    // tensor: the plan says what DTensor holds.
    for (int64_t r = 0; r < world; ++r) plan->Add(plan->ranks[r], i, ChunkSlice(0, item.shape[0], world, r));
  }
  return CheckBudgets(*plan, setup.budgets, absl::StrCat("fsdp spreads the model over all ", world, " GPUs"),
                      FsdpGpusNeeded(plan->items, world, TightestBudget(setup.budgets.per_rank_bytes)),
                      no_fit);
}

// "dim-0 chunk 2/4 of 280 tensors, 3 whole".
std::string FsdpHolds(const Plan& plan, const RankPlan& rank, size_t sliced, size_t whole) {
  return absl::StrCat("dim-0 chunk ", rank.rank + 1, "/", plan.world_size, " of ", sliced,
                      sliced == 1 ? " tensor" : " tensors",
                      whole > 0 ? absl::StrCat(", ", whole, " whole") : "");
}

}  // namespace

const Strategy kFsdpStrategy = [] {
  Strategy s("fsdp", "every tensor split on dim 0 over all ranks, like FSDP2", &PlanFsdp);
  s.holds = &FsdpHolds;
  return s;
}();

}  // namespace metaload
