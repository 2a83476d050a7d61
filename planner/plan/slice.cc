// Strided byte ranges of a tensor slice.
#include "planner/plan/slice.h"

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
