// The three kinds of failure a user acts on differently: the one mapping behind metactl's exit
// codes (2, 3, 1) and the Python package's exceptions (BadInputError, MetaTensorError,
// LoadError), so that both say the same thing about the same failure.
//
// Most codes say their kind (InvalidArgument: bad input; Unavailable: a failure). One does not:
// FailedPrecondition ("fix the state first") is what a tensor that would stay on meta, a path
// that is not a regular file and a daemon that is not the coordinator all are. A status whose
// code is not enough carries its kind as a payload (kErrorKindUrl), set where it is made:
//
//   return MetaTensorError("model x: 2 tensors would stay on meta: ...");       // exit 3
//   return WithErrorKind(absl::FailedPreconditionError(...), ErrorKind::kBadInput);  // exit 2
//
// Payloads cross gRPC (proto/convert.h), so a daemon's refusal keeps its kind on the client;
// Annotate (util/status_macros.h) keeps them too. Thread-safety: pure functions.
#ifndef METALOAD_UTIL_ERROR_KIND_H_
#define METALOAD_UTIL_ERROR_KIND_H_

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

// What each kind is called in a payload, the exit code metactl ends with
// (client/metactl/commands.h) and the exception the Python package raises
// (client/python/metaload/_errors.py); in ErrorKind's order.
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

// `status` (not OK) marked as of `kind`, whatever its code says.
inline absl::Status WithErrorKind(absl::Status status, ErrorKind kind) {
  if (!status.ok()) status.SetPayload(kErrorKindUrl, absl::Cord(InfoOf(kind).name));
  return status;
}

// FailedPrecondition marked kMetaTensor: some tensor would stay, or stayed, on meta.
inline absl::Status MetaTensorError(absl::string_view message) {
  return WithErrorKind(absl::FailedPreconditionError(message), ErrorKind::kMetaTensor);
}

// The kind its payload says; without one (or one this build does not know), the code's:
// FailedPrecondition without a payload is a failure (state to fix), not a tensor on meta.
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

}  // namespace metaload

#endif  // METALOAD_UTIL_ERROR_KIND_H_
