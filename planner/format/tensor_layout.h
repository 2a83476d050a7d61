// Where one tensor of a checkpoint lives: its file and absolute byte range there.
#ifndef METALOAD_PLANNER_FORMAT_TENSOR_LAYOUT_H_
#define METALOAD_PLANNER_FORMAT_TENSOR_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "planner/format/dtype.h"

namespace metaload {

struct TensorLayout {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  // File name relative to the checkpoint folder ("model-00001-of-00004.safetensors").
  std::string file;
  // Absolute byte offsets in `file`: [begin_offset, end_offset).
  uint64_t begin_offset = 0;
  uint64_t end_offset = 0;
  // XXH3-64 of the bytes [begin_offset, end_offset) when the model was registered with
  // --digest (docs/integrity.md); absent otherwise.
  std::optional<uint64_t> xxh3;

  uint64_t size_bytes() const { return end_offset - begin_offset; }
};

// Product of dims; 1 for a scalar. REQUIRES: TensorBytesFit(shape, ...) (validated at the edge).
int64_t NumElements(const std::vector<int64_t>& shape);
// The one check of a shape from outside (a skeleton, a config, a registration): sets `bytes` to
// the size of a `dtype` tensor of `shape` and returns true, or false when a dimension is negative
// or the size is 2^63 bytes or more. Then the element count fits NumElements' int64 and sizes
// can be summed as uint64 with AddOverflows.
bool TensorBytesFit(absl::Span<const int64_t> shape, DType dtype, uint64_t* bytes);
// "[4096, 11008]"
std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace metaload

#endif  // METALOAD_PLANNER_FORMAT_TENSOR_LAYOUT_H_
