// metaload/errors.h: the three kinds of failure a caller acts on differently, and how a status
// any metaload function returns maps to one. The same mapping gives `metactl`'s exit codes
// (2, 3, 1) and the Python package's exceptions (BadInputError, MetaTensorError, LoadError), so
// all three say the same thing about the same failure.
//
//   absl::StatusOr<metaload::LoadedRank> load = metaload::LoadRank(options);
//   if (!load.ok()) {
//     switch (metaload::KindOf(load.status())) {
//       case metaload::ErrorKind::kBadInput: ...    // fix the request, the files or the config
//       case metaload::ErrorKind::kMetaTensor: ...  // a tensor would stay on meta: see the message
//       case metaload::ErrorKind::kFailure: ...     // a daemon down, a deadline: maybe retry
//     }
//     return metaload::ExitCodeOf(metaload::KindOf(load.status()));  // as metactl would exit
//   }
//
// Most status codes say their kind (InvalidArgument: bad input; Unavailable: a failure). One
// does not: FailedPrecondition ("fix the state first") is what a tensor that would stay on meta,
// a path that is not a regular file and a daemon that is not the coordinator all are. A status
// whose code is not enough carries its kind as a payload at kErrorKindUrl (its value: the kind's
// name), set where the status is made; it survives gRPC and added context.
//
// Header-only (Abseil only, C++17). Thread-safety: pure functions and constants.
#ifndef METALOAD_INCLUDE_METALOAD_ERRORS_H_
#define METALOAD_INCLUDE_METALOAD_ERRORS_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace metaload {

enum class ErrorKind {
  kBadInput,    // fix the request, the files or the configuration (exit 2, ValueError)
  kMetaTensor,  // a tensor would stay or stayed on meta (exit 3)
  kFailure,     // anything else: a daemon down, a deadline, an I/O error, state to fix (exit 1)
};

// The type URL of the payload that says a status's kind; its value is the kind's name.
inline constexpr absl::string_view kErrorKindUrl = "type.metaload.dev/metaload.ErrorKind";

// What each kind is called in a payload, the exit code metactl ends with and the exception the
// Python package raises; in ErrorKind's order.
struct ErrorKindInfo {
  absl::string_view name;
  int exit_code;
  const char* python_exception;
};
inline constexpr ErrorKindInfo kErrorKinds[] = {
    {"bad_input", 2, "BadInputError"}, {"meta_tensor", 3, "MetaTensorError"}, {"failure", 1, "LoadError"}};

constexpr const ErrorKindInfo& InfoOf(ErrorKind kind) { return kErrorKinds[static_cast<int>(kind)]; }
constexpr int ExitCodeOf(ErrorKind kind) { return InfoOf(kind).exit_code; }
constexpr const char* PythonExceptionOf(ErrorKind kind) { return InfoOf(kind).python_exception; }

// The kind its payload says; without one (or one this build does not know), the code's:
// FailedPrecondition without a payload is a failure (state to fix), not a tensor on meta.
// REQUIRES: !status.ok().
inline ErrorKind KindOf(const absl::Status& status) {
  if (auto marked = status.GetPayload(kErrorKindUrl)) {  // absl::optional<absl::Cord>
    for (ErrorKind kind : {ErrorKind::kBadInput, ErrorKind::kMetaTensor, ErrorKind::kFailure}) {
      if (*marked == InfoOf(kind).name) return kind;
    }
  }
  switch (status.code()) {
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
    default:
      return ErrorKind::kFailure;
  }
}

// Shorthand: some tensor would stay, or stayed, on meta. REQUIRES: !status.ok().
inline bool IsMetaTensorError(const absl::Status& status) { return KindOf(status) == ErrorKind::kMetaTensor; }

}  // namespace metaload

#endif  // METALOAD_INCLUDE_METALOAD_ERRORS_H_
