#include "planner/strategy/strategies/partition.h"

#include <algorithm>
#include <limits>

namespace metaload {
namespace {

// Part r may hold at most min(limit, capacity r).
uint64_t CapOf(absl::Span<const uint64_t> capacities_bytes, size_t part, uint64_t limit) {
  return std::min(limit, capacities_bytes[part]);
}

// Filling each part in order as full as it allows covers the longest possible prefix (an
// exchange argument), so this decides whether `limit` admits any partition at all.
bool FitsWithin(absl::Span<const uint64_t> sizes_bytes, absl::Span<const uint64_t> capacities_bytes,
                uint64_t limit) {
  size_t next = 0;
  for (size_t part = 0; part < capacities_bytes.size() && next < sizes_bytes.size(); ++part) {
    const uint64_t cap = CapOf(capacities_bytes, part, limit);
    uint64_t used = 0;
    while (next < sizes_bytes.size() && sizes_bytes[next] <= cap - used) used += sizes_bytes[next++];
  }
  return next == sizes_bytes.size();
}

}  // namespace

std::optional<std::vector<size_t>> PartitionContiguous(absl::Span<const uint64_t> sizes_bytes,
                                                       absl::Span<const uint64_t> capacities_bytes) {
  const size_t parts = capacities_bytes.size();
  const size_t count = sizes_bytes.size();
  std::vector<uint64_t> prefix(count + 1, 0);  // prefix[i]: bytes of sizes [0, i)
  uint64_t largest = 0;
  for (size_t i = 0; i < count; ++i) {
    prefix[i + 1] = prefix[i] + sizes_bytes[i];
    largest = std::max(largest, sizes_bytes[i]);
  }
  if (!FitsWithin(sizes_bytes, capacities_bytes, std::numeric_limits<uint64_t>::max())) return std::nullopt;

  // The smallest feasible limit on the largest part: feasibility is monotone in the limit.
  uint64_t low = largest, high = prefix[count];
  while (low < high) {
    const uint64_t mid = low + (high - low) / 2;
    if (FitsWithin(sizes_bytes, capacities_bytes, mid)) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  const uint64_t limit = low;

  // earliest_start[r]: the smallest index from which parts r.. can still hold everything
  // (filling from the back as full as allowed is optimal, as above).
  std::vector<size_t> earliest_start(parts + 1, count);
  for (size_t part = parts; part-- > 0;) {
    const uint64_t cap = CapOf(capacities_bytes, part, limit);
    size_t start = earliest_start[part + 1];
    while (start > 0 && prefix[earliest_start[part + 1]] - prefix[start - 1] <= cap) --start;
    earliest_start[part] = start;
  }

  // Each part ends where it comes closest to an even share of what is left, without
  // exceeding its cap and without leaving the later parts more than they can hold.
  std::vector<size_t> ends(parts);
  size_t start = 0;
  for (size_t part = 0; part < parts; ++part) {
    const uint64_t cap = CapOf(capacities_bytes, part, limit);
    const uint64_t parts_left = parts - part;
    const uint64_t left_bytes = prefix[count] - prefix[start];
    const uint64_t share = left_bytes / parts_left + (left_bytes % parts_left != 0 ? 1 : 0);
    const size_t min_end = std::max(start, earliest_start[part + 1]);
    // Largest end with prefix[end] - prefix[start] <= cap.
    const size_t max_end = static_cast<size_t>(
        std::upper_bound(prefix.begin() + start, prefix.end(), prefix[start] + std::min(cap, left_bytes)) -
        prefix.begin() - 1);
    size_t end = min_end;
    if (max_end > min_end) {
      // First end reaching the share, then the end just before it if that is as close.
      size_t reach = static_cast<size_t>(
          std::lower_bound(prefix.begin() + min_end, prefix.begin() + max_end + 1, prefix[start] + share) -
          prefix.begin());
      reach = std::min(reach, max_end);
      end = reach;
      if (reach > min_end) {
        const uint64_t over =
            prefix[reach] - prefix[start] >= share ? prefix[reach] - prefix[start] - share : 0;
        const uint64_t under = share - (prefix[reach - 1] - prefix[start]);
        if (under <= over) end = reach - 1;
      }
    }
    // A part is left empty only when nothing is left for it, so empty ranks come last.
    if (end == start && max_end > start) end = start + 1;
    ends[part] = end;
    start = end;
  }
  return ends;
}

}  // namespace metaload
