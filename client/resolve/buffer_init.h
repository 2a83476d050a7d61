// Computing non-persistent buffers (rotary inv_freq and the like) from the rule the skeleton
// gives them (docs/skeleton-format.md), instead of leaving them on meta or uninitialized.
#ifndef METALOAD_CLIENT_RESOLVE_BUFFER_INIT_H_
#define METALOAD_CLIENT_RESOLVE_BUFFER_INIT_H_

#include <torch/types.h>

#include <string>

#include "absl/status/status.h"

namespace metaload {

// Fills `out` (already allocated with the buffer's shape and dtype, on its device).
// InvalidArgument for a rule we cannot parse, naming it.
absl::Status ComputeBuffer(const std::string& rule, at::Tensor& out);

}  // namespace metaload

#endif  // METALOAD_CLIENT_RESOLVE_BUFFER_INIT_H_
