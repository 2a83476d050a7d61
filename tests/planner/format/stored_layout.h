// Stored tensors and quantized values for tests: a layout that need only its name, dtype and shape (its byte
// range from offset 0, so that size_bytes() is the shape's).
#ifndef METALOAD_TESTS_PLANNER_FORMAT_STORED_LAYOUT_H_
#define METALOAD_TESTS_PLANNER_FORMAT_STORED_LAYOUT_H_

#include <string>
#include <utility>
#include <vector>

#include "planner/format/quantization.h"
#include "planner/format/tensor_layout.h"

namespace metaload {

inline TensorLayout Stored(std::string name, DType dtype, std::vector<int64_t> shape) {
  TensorLayout t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  uint64_t bytes = 0;
  TensorBytesFit(t.shape, t.dtype, &bytes);
  t.end_offset = bytes;
  return t;
}

// The MXFP4 value `e` of experts' codes `e_blocks` shaped `blocks` ([E, R, G, 16]) and their
// scales `e_scales` ([E, R, G]).
inline QuantizedValue Mxfp4Experts(const std::vector<int64_t>& blocks) {
  Quantization q;
  q.method = "mxfp4";
  q.scheme = QuantScheme::kMxfp4;
  return FindQuantized(q, {Stored("e_blocks", DType::kU8, blocks),
                           Stored("e_scales", DType::kU8, {blocks[0], blocks[1], blocks[2]})})
      .values.at("e");
}

}  // namespace metaload

#endif  // METALOAD_TESTS_PLANNER_FORMAT_STORED_LAYOUT_H_
