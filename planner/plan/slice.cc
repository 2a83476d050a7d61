// Strided byte ranges of a tensor slice.
#include "planner/plan/slice.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace metaload {

uint64_t SliceSizeBytes(const std::vector<int64_t>& shape, DType dtype,
                        const std::optional<TensorSlice>& slice) {
  uint64_t elements = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t extent = slice.has_value() && static_cast<int>(d) == slice->dim ? slice->length : shape[d];
    elements *= static_cast<uint64_t>(extent);
  }
  return elements * static_cast<uint64_t>(DTypeSizeBytes(dtype));
}

TensorSlice ChunkSlice(int dim, int64_t extent, int64_t chunks, int64_t index) {
  const int64_t chunk = extent / chunks + (extent % chunks != 0 ? 1 : 0);
  // index * chunk < chunks * ceil(extent / chunks) < extent + chunks: no overflow.
  const int64_t start = std::min(extent, index * chunk);
  return TensorSlice{dim, start, std::min(extent - start, chunk)};
}

absl::StatusOr<StridedRuns> SliceRuns(const std::optional<TensorSlice>& slice, const TensorLayout& layout) {
  const uint64_t whole_bytes = SliceSizeBytes(layout.shape, layout.dtype, std::nullopt);
  if (layout.end_offset < layout.begin_offset || layout.size_bytes() != whole_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", layout.name, ": byte range [", layout.begin_offset, ", ", layout.end_offset,
                     ") does not hold ", ShapeToString(layout.shape), " elements"));
  }
  auto contiguous = [&](uint64_t offset, uint64_t bytes) {
    return StridedRuns{offset, bytes, bytes, bytes == 0 ? 0u : 1u};
  };
  if (!slice.has_value()) return contiguous(layout.begin_offset, whole_bytes);
  if (slice->dim < 0 || slice->dim >= static_cast<int>(layout.shape.size()) || slice->start < 0 ||
      slice->length < 0 || slice->start > layout.shape[slice->dim] ||
      slice->length > layout.shape[slice->dim] - slice->start) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", layout.name, ": slice dim ", slice->dim, " [",
                                                   slice->start, ", +", slice->length, ") is outside ",
                                                   ShapeToString(layout.shape)));
  }
  // Row-major: the slice is `outer` runs (one per index of the dims before `dim`), each of
  // `length` rows of `inner` bytes, `stride` bytes apart.
  uint64_t outer = 1, inner = static_cast<uint64_t>(DTypeSizeBytes(layout.dtype));
  for (int d = 0; d < slice->dim; ++d) outer *= static_cast<uint64_t>(layout.shape[d]);
  for (size_t d = slice->dim + 1; d < layout.shape.size(); ++d)
    inner *= static_cast<uint64_t>(layout.shape[d]);
  const uint64_t stride = inner * static_cast<uint64_t>(layout.shape[slice->dim]);
  const uint64_t run = inner * static_cast<uint64_t>(slice->length);
  const uint64_t first = layout.begin_offset + inner * static_cast<uint64_t>(slice->start);
  if (run == 0 || outer == 0) return StridedRuns{first, 0, stride, 0};
  if (run == stride || outer == 1) return contiguous(first, outer * run);
  return StridedRuns{first, run, stride, outer};
}

absl::StatusOr<std::vector<StridedRuns>> BoxRuns(const TensorBox& box, const TensorLayout& layout) {
  const size_t dims = layout.shape.size();
  const uint64_t whole_bytes = SliceSizeBytes(layout.shape, layout.dtype, std::nullopt);
  if (layout.end_offset < layout.begin_offset || layout.size_bytes() != whole_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", layout.name, ": byte range [", layout.begin_offset, ", ", layout.end_offset,
                     ") does not hold ", ShapeToString(layout.shape), " elements"));
  }
  if (box.start.size() != dims || box.length.size() != dims) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", layout.name, " ", ShapeToString(layout.shape),
                                                   ": a box of ", box.start.size(), " dimensions"));
  }
  for (size_t d = 0; d < dims; ++d) {
    if (box.start[d] < 0 || box.length[d] < 0 || box.start[d] > layout.shape[d] ||
        box.length[d] > layout.shape[d] - box.start[d]) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", layout.name, " ", ShapeToString(layout.shape),
                                                     ": dim ", d, " [", box.start[d], ", +", box.length[d],
                                                     ") is outside it"));
    }
    if (box.length[d] == 0) return std::vector<StridedRuns>{};
  }
  // Row-major strides in bytes; the innermost partial dimension k makes the runs.
  std::vector<uint64_t> stride(dims + 1, static_cast<uint64_t>(DTypeSizeBytes(layout.dtype)));
  for (size_t d = dims; d-- > 0;) stride[d] = stride[d + 1] * static_cast<uint64_t>(layout.shape[d]);
  int k = -1;
  for (size_t d = dims; d-- > 0;) {
    if (box.length[d] != layout.shape[d]) {
      k = static_cast<int>(d);
      break;
    }
  }
  if (k < 0) return std::vector<StridedRuns>{StridedRuns{layout.begin_offset, whole_bytes, whole_bytes, 1}};
  const uint64_t run = static_cast<uint64_t>(box.length[k]) * stride[k + 1];
  uint64_t base = layout.begin_offset;
  for (int d = 0; d <= k; ++d) base += static_cast<uint64_t>(box.start[d]) * stride[d + 1];
  if (k == 0) return std::vector<StridedRuns>{StridedRuns{base, run, run, 1}};
  // Dimension k-1 varies fastest among the outer ones: one strided series per index of the
  // dimensions before it, merged when a series continues the last.
  std::vector<StridedRuns> runs;
  std::vector<int64_t> index(static_cast<size_t>(k - 1), 0);
  while (true) {
    uint64_t first = base;
    for (int d = 0; d < k - 1; ++d) first += static_cast<uint64_t>(index[d]) * stride[d + 1];
    StridedRuns series{first, run, stride[k], static_cast<uint64_t>(box.length[k - 1])};
    StridedRuns* last = runs.empty() ? nullptr : &runs.back();
    if (last != nullptr && last->run_bytes == series.run_bytes && last->stride_bytes == series.stride_bytes &&
        last->first_offset + last->run_count * last->stride_bytes == series.first_offset) {
      last->run_count += series.run_count;
    } else {
      runs.push_back(series);
    }
    int d = k - 2;
    for (; d >= 0; --d) {
      if (++index[d] < box.length[d]) break;
      index[d] = 0;
    }
    if (d < 0) break;
  }
  for (StridedRuns& r : runs) {
    if (r.run_bytes == r.stride_bytes) r = StridedRuns{r.first_offset, r.run_bytes * r.run_count, 0, 1};
    if (r.run_count == 1) r.stride_bytes = r.run_bytes;
  }
  return runs;
}

absl::StatusOr<StridedRuns> ItemRuns(const ReadItem& item) {
  TensorLayout layout;
  layout.name = item.tensor;
  layout.dtype = item.dtype;
  layout.shape = item.shape;
  layout.file = item.file;
  layout.begin_offset = item.begin_offset;
  layout.end_offset = item.end_offset;
  return SliceRuns(item.slice, layout);
}

absl::StatusOr<std::vector<ByteRange>> SliceByteRanges(const ReadItem& item, const TensorLayout& layout) {
  ML_ASSIGN_OR_RETURN(StridedRuns runs, SliceRuns(item.slice, layout));
  std::vector<ByteRange> ranges;
  ranges.reserve(runs.run_count);
  for (uint64_t i = 0; i < runs.run_count; ++i) {
    ranges.push_back({runs.first_offset + i * runs.stride_bytes, runs.run_bytes});
  }
  return ranges;
}

}  // namespace metaload
