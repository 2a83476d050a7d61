// Splitting an ordered sequence of sizes into contiguous parts, one per device, each within
// that device's capacity: how the `layers` strategy spreads placement units over ranks
// (and how pipeline stages will be cut). Pure and deterministic.
//
//   std::optional<std::vector<size_t>> ends = PartitionContiguous(unit_bytes, rank_budget_bytes);
//   // part r holds sizes [r == 0 ? 0 : (*ends)[r - 1], (*ends)[r])
#ifndef METALOAD_PLANNER_STRATEGY_STRATEGIES_PARTITION_H_
#define METALOAD_PLANNER_STRATEGY_STRATEGIES_PARTITION_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/types/span.h"

namespace metaload {

// Returns, for each part, its end index (exclusive) into `sizes_bytes`; parts may be empty.
// The largest part is as small as possible (the optimum, not an approximation); among
// partitions reaching it, each part in turn is cut closest to an even share of what is left,
// so the remainder is spread instead of piled onto the last part; empty parts (more parts
// than sizes) come last. nullopt when no partition
// keeps every part within its capacity.
// REQUIRES: capacities_bytes is non-empty; the sum of sizes_bytes fits in 64 bits.
std::optional<std::vector<size_t>> PartitionContiguous(absl::Span<const uint64_t> sizes_bytes,
                                                       absl::Span<const uint64_t> capacities_bytes);

}  // namespace metaload

#endif  // METALOAD_PLANNER_STRATEGY_STRATEGIES_PARTITION_H_
