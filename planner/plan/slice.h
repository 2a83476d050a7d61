// Which bytes of a checkpoint file hold a slice of a tensor. Readers (the rank's direct path,
// the daemon's gather) call this instead of listing strided ranges in the plan, which would
// make a plan for a row-parallel 405B model megabytes long. Pure; no I/O.
//
//   ML_ASSIGN_OR_RETURN(StridedRuns runs, ItemRuns(item));
//   for (uint64_t i = 0; i < runs.run_count; ++i, dst += runs.run_bytes)
//     pread(fd, dst, runs.run_bytes, runs.first_offset + i * runs.stride_bytes);
#ifndef METALOAD_PLANNER_PLAN_SLICE_H_
#define METALOAD_PLANNER_PLAN_SLICE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/format/tensor_layout.h"
#include "planner/plan/plan.h"
#include "util/strided_runs.h"

namespace metaload {

struct ByteRange {
  uint64_t offset = 0;  // absolute in the file
  uint64_t length_bytes = 0;

  bool operator==(const ByteRange& other) const {
    return offset == other.offset && length_bytes == other.length_bytes;
  }
};

// `slice` (the whole tensor when absent) of the tensor stored at `layout`. Errors as for
// SliceByteRanges.
absl::StatusOr<StridedRuns> SliceRuns(const std::optional<TensorSlice>& slice, const TensorLayout& layout);
// An item's runs in its file: its stored dtype, shape and "offsets" are the layout (plan.h).
absl::StatusOr<StridedRuns> ItemRuns(const ReadItem& item);

// The file ranges holding `item`'s slice of the row-major tensor stored at `layout`, in the
// order the slice's bytes are laid out in memory; adjacent runs are coalesced, so a dim-0
// slice (or a slice covering its whole dim) is one range. A whole-tensor item gives the
// layout's range. InvalidArgument when the slice lies outside the layout's shape or the
// layout's byte range does not match its shape and dtype.
absl::StatusOr<std::vector<ByteRange>> SliceByteRanges(const ReadItem& item, const TensorLayout& layout);

// Part of a tensor on every dimension: indexes [start[d], start[d] + length[d]). What one rank
// of a DTensor holds: Shard on one mesh dimension is a slice of one tensor dimension, Shard
// on two mesh dimensions (FSDP x TP) a box; uneven shards are boxes too.
struct TensorBox {
  std::vector<int64_t> start;
  std::vector<int64_t> length;
};

// The bytes of `box` of the tensor stored at `layout`, in the row-major order of the box, as
// few strided runs as the box allows: one for any box of a 1-D or 2-D tensor, or whenever the
// dimensions before the innermost partial one are whole; else one per index of the outer
// partial dimensions. None for an empty box. InvalidArgument when the box does not match the
// shape's rank or lies outside it, or the layout's byte range does not hold its shape.
absl::StatusOr<std::vector<StridedRuns>> BoxRuns(const TensorBox& box, const TensorLayout& layout);

// Piece `index` of `chunks` along `dim`, of extent `extent`, as torch.chunk and DTensor's
// Shard(dim) cut it (torch 2.15, torch/distributed/tensor/placement_types.py,
// Shard.local_shard_size_and_offset): pieces of ceil(extent / chunks) from the start, the last
// one shorter, and any past the end empty, starting at `extent` with length 0, so that every rank
// of a group has its piece. 5 rows over 4: [0, 2), [2, 4), [4, 5), [5, 5); 320 over 3: 107, 107, 106.
// REQUIRES: 0 <= extent, 0 <= index < chunks, extent + chunks < 2^63 (shapes are validated at the edge).
TensorSlice ChunkSlice(int dim, int64_t extent, int64_t chunks, int64_t index);

// Bytes of `slice` of a tensor of `shape` and `dtype` (the whole tensor when absent).
// REQUIRES: the slice lies inside `shape` (validated at the edge).
uint64_t SliceSizeBytes(const std::vector<int64_t>& shape, DType dtype,
                        const std::optional<TensorSlice>& slice);

}  // namespace metaload

#endif  // METALOAD_PLANNER_PLAN_SLICE_H_
