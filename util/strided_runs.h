// Bytes of a file laid out as equal runs at a fixed stride: a tensor slice as stored
// (planner/plan/slice.h computes them), the wire form of a strided ReadRange, and what
// ReadOnlyFile::ReadRuns reads.
#ifndef METALOAD_UTIL_STRIDED_RUNS_H_
#define METALOAD_UTIL_STRIDED_RUNS_H_

#include <cstdint>

namespace metaload {

// A row-major slice in its file: `run_count` runs of `run_bytes`, run i starting at
// first_offset + i * stride_bytes. Contiguous (a whole tensor, a dim-0 slice, a slice covering
// its whole dim) is one run; a slice on dim >= 1 is one run per index of the dims before it.
// This is also the wire form of a strided read (ReadRangeRequest), so the daemon gathers a
// slice from four numbers instead of a list of ranges.
struct StridedRuns {
  uint64_t first_offset = 0;
  uint64_t run_bytes = 0;
  uint64_t stride_bytes = 0;
  uint64_t run_count = 0;

  uint64_t total_bytes() const { return run_bytes * run_count; }
  // From the first run's first byte to the last run's last: what reading them as one range
  // covers (0 for no runs). The caller knows it does not overflow (ValidateRangeRequest, or a
  // slice of a tensor in its file).
  uint64_t span_bytes() const { return run_count == 0 ? 0 : (run_count - 1) * stride_bytes + run_bytes; }
  bool operator==(const StridedRuns& other) const {
    return first_offset == other.first_offset && run_bytes == other.run_bytes &&
           stride_bytes == other.stride_bytes && run_count == other.run_count;
  }
};

}  // namespace metaload

#endif  // METALOAD_UTIL_STRIDED_RUNS_H_
