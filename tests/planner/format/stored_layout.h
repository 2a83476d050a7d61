// A stored tensor's layout for tests that need only its name, dtype and shape (its byte range
// from offset 0, so that size_bytes() is the shape's).
#ifndef METALOAD_TESTS_PLANNER_FORMAT_STORED_LAYOUT_H_
#define METALOAD_TESTS_PLANNER_FORMAT_STORED_LAYOUT_H_

#include <string>
#include <utility>
#include <vector>

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

}  // namespace metaload

#endif  // METALOAD_TESTS_PLANNER_FORMAT_STORED_LAYOUT_H_
