#include "client/buffer_init.h"

#include "absl/strings/str_cat.h"

namespace metaload {

absl::Status ComputeBuffer(const std::string& rule, at::Tensor& out) {
  return absl::InvalidArgumentError(absl::StrCat("unknown buffer rule \"", rule, "\""));
}

}  // namespace metaload
