#include "planner/format/tensor_layout.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace metaload {

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace metaload
