// The one boundary where metaload calls LibTorch: dtype mapping, and turning c10::Error
// (LibTorch throws) into absl::Status with context. Used by client/ and by the daemon's
// meta store; include only where tensors are really used (LibTorch headers are heavy).
#ifndef METALOAD_LIBTORCH_TORCH_GLUE_H_
#define METALOAD_LIBTORCH_TORCH_GLUE_H_

#include <torch/types.h>

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/format/dtype.h"

namespace metaload {

// Unimplemented for a dtype LibTorch cannot hold.
absl::StatusOr<c10::ScalarType> ToScalarType(DType dtype);
absl::StatusOr<DType> FromScalarType(c10::ScalarType type);

// Runs `fn`, turning any c10::Error or std::exception into Internal("context: what").
absl::Status CallTorch(absl::string_view context, const std::function<void()>& fn);

}  // namespace metaload

#endif  // METALOAD_LIBTORCH_TORCH_GLUE_H_
