#include "planner/format/tensor_layout.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/units.h"

namespace metaload {

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool TensorBytesFit(absl::Span<const int64_t> shape, DType dtype, uint64_t* bytes) {
  uint64_t size = static_cast<uint64_t>(DTypeSizeBytes(dtype));
  for (int64_t d : shape) {
    if (d < 0 || MulOverflows(size, static_cast<uint64_t>(d), &size) ||
        size > static_cast<uint64_t>(INT64_MAX)) {
      return false;
    }
  }
  *bytes = size;
  return true;
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace metaload
