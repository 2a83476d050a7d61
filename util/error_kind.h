// The three kinds of failure a user acts on differently, from a status code: the one mapping
// behind metactl's exit codes (2, 3, 1) and the Python package's exceptions (BadInputError,
// MetaTensorError, LoadError), so that both say the same thing about the same failure.
#ifndef METALOAD_UTIL_ERROR_KIND_H_
#define METALOAD_UTIL_ERROR_KIND_H_

#include "absl/status/status.h"

namespace metaload {

enum class ErrorKind {
  kBadInput,    // fix the request, the files or the configuration (exit 2, ValueError)
  kMetaTensor,  // a tensor would stay or stayed on meta (exit 3)
  kFailure,     // anything else: a daemon down, a deadline, an I/O error (exit 1)
};

inline ErrorKind KindOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:  // credentials missing or wrong: the setup to fix
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnimplemented:
      return ErrorKind::kBadInput;
    case absl::StatusCode::kFailedPrecondition:
      return ErrorKind::kMetaTensor;
    default:
      return ErrorKind::kFailure;
  }
}

}  // namespace metaload

#endif  // METALOAD_UTIL_ERROR_KIND_H_
