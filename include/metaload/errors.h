// metaload/errors.h: the kinds of failure a caller acts on differently, and how a status any
// metaload function returns maps to one. The same mapping gives `metactl`'s exit codes and the
// Python package's exceptions, so all of them say the same thing about the same failure:
//
//   kind         exit  Python           what to do
//   bad_input    2     BadInputError    fix the request, the files or the configuration
//   meta_tensor  3     MetaTensorError  verification failed: see the tensors it names
//   failure      1     LoadError        the system or storage failed (I/O error, a stream that
//                                       ended early, a daemon down): look at it, maybe retry
//   busy         1     BusyError        a queue or a table is full: try again (clients retry it
//                                       with backoff; BusyError is a LoadError)
//
//   absl::StatusOr<metaload::LoadedRank> load = metaload::LoadRank(options);
//   if (!load.ok()) {
//     switch (metaload::KindOf(load.status())) {
//       case metaload::ErrorKind::kBadInput: ...    // fix the request, the files or the config
//       case metaload::ErrorKind::kMetaTensor: ...  // a tensor would stay on meta: see the message
//       case metaload::ErrorKind::kFailure: ...     // storage or a daemon failed
//       case metaload::ErrorKind::kBusy: ...        // try again later
//     }
//     return metaload::ExitCodeOf(metaload::KindOf(load.status()));  // as metactl would exit
//   }
//
// Most status codes say their kind (InvalidArgument: bad input; DataLoss: bytes lost or broken
// on their way, a failure; ResourceExhausted: a full queue, busy). Where the code is not enough
// — FailedPrecondition is a tensor that would stay on meta, a path that is not a regular file
// and a daemon that is not the coordinator; DataLoss is also a corrupt file header, which is
// the user's file to fix; ResourceExhausted is also "the model does not fit" — the status
// carries its kind as a payload at kErrorKindUrl (its value: the kind's name), set where the
// status is made; it survives gRPC and added context. The table is pinned by
// tests/client/error_kinds_test.cc and written out in docs/cli.md ("Exit codes").
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
  kFailure,     // the system or storage failed: a daemon down, a deadline, an I/O error (exit 1)
  kBusy,        // a queue, a table or a budget is full right now: try again (exit 1)
};
inline constexpr ErrorKind kAllErrorKinds[] = {ErrorKind::kBadInput, ErrorKind::kMetaTensor,
                                               ErrorKind::kFailure, ErrorKind::kBusy};

// The type URL of the payload that says a status's kind; its value is the kind's name.
inline constexpr absl::string_view kErrorKindUrl = "type.metaload.dev/metaload.ErrorKind";

// What each kind is called in a payload, the exit code metactl ends with and the exception the
// Python package raises; in ErrorKind's order.
struct ErrorKindInfo {
  absl::string_view name;
  int exit_code;
  const char* python_exception;
};
inline constexpr ErrorKindInfo kErrorKinds[] = {{"bad_input", 2, "BadInputError"},
                                                {"meta_tensor", 3, "MetaTensorError"},
                                                {"failure", 1, "LoadError"},
                                                {"busy", 1, "BusyError"}};

constexpr const ErrorKindInfo& InfoOf(ErrorKind kind) { return kErrorKinds[static_cast<int>(kind)]; }
constexpr int ExitCodeOf(ErrorKind kind) { return InfoOf(kind).exit_code; }
constexpr const char* PythonExceptionOf(ErrorKind kind) { return InfoOf(kind).python_exception; }

// The kind its payload says; without one (or one this build does not know), the code's:
// FailedPrecondition without a payload is a failure (state to fix), not a tensor on meta.
// Only ResourceExhausted is busy by its code: an Unavailable that means "try again" (a daemon
// starting, a file changing under its reader) is marked so where it is made.
// REQUIRES: !status.ok().
inline ErrorKind KindOf(const absl::Status& status) {
  if (auto marked = status.GetPayload(kErrorKindUrl)) {  // absl::optional<absl::Cord>
    for (ErrorKind kind : kAllErrorKinds) {
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
    case absl::StatusCode::kUnimplemented:
      return ErrorKind::kBadInput;
    case absl::StatusCode::kResourceExhausted:  // a full queue, stream table or upload budget
      return ErrorKind::kBusy;
    default:  // DataLoss (an I/O error, a stream that ended early), Unavailable, DeadlineExceeded, ...
      return ErrorKind::kFailure;
  }
}

// Shorthand: some tensor would stay, or stayed, on meta. REQUIRES: !status.ok().
inline bool IsMetaTensorError(const absl::Status& status) { return KindOf(status) == ErrorKind::kMetaTensor; }

// Shorthand: the answer was "busy, try again"; a client may retry it with backoff.
// REQUIRES: !status.ok().
inline bool IsBusyError(const absl::Status& status) { return KindOf(status) == ErrorKind::kBusy; }

}  // namespace metaload

#endif  // METALOAD_INCLUDE_METALOAD_ERRORS_H_
