// A TensorToWrite whose bytes depend on its name and on each byte's position, so a test that
// reads them back catches data written to, or read from, the wrong place.
#ifndef METALOAD_TESTS_PLANNER_FORMAT_PATTERNED_TENSOR_H_
#define METALOAD_TESTS_PLANNER_FORMAT_PATTERNED_TENSOR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "planner/format/safetensors_writer.h"

namespace metaload::testing {

inline TensorToWrite Patterned(std::string name, DType dtype, std::vector<int64_t> shape) {
  TensorToWrite t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  const uint8_t seed = static_cast<uint8_t>(std::hash<std::string>()(t.name));
  t.fill = [seed](absl::Span<uint8_t> out) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(seed + i * 13);
  };
  return t;
}

// The bytes `t.fill` produces for a tensor of `size_bytes`.
inline std::string FilledBytes(const TensorToWrite& t, uint64_t size_bytes) {
  std::vector<uint8_t> bytes(size_bytes);
  t.fill(absl::MakeSpan(bytes));
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace metaload::testing

#endif  // METALOAD_TESTS_PLANNER_FORMAT_PATTERNED_TENSOR_H_
