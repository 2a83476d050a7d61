// Making statuses of a kind: the error kinds themselves, and how a status maps to one
// (KindOf, ExitCodeOf, PythonExceptionOf), are public (include/metaload/errors.h: the one
// mapping behind metactl's exit codes and the Python package's exceptions); what only metaload
// itself does, marking the statuses it makes, is here:
//
//   return MetaTensorError("rank 1: lm_head.weight: still on meta");                  // exit 3
//   return RefusedModelError("model x: 2 tensors would stay on meta: ...");           // exit 2
//   return WithErrorKind(absl::FailedPreconditionError(...), ErrorKind::kBadInput);  // exit 2
//   return TryAgainError("node-a is starting; try again");                           // exit 1, busy
//
// Payloads cross gRPC (proto/convert.h), so a daemon's refusal keeps its kind on the client;
// Annotate (util/status_macros.h) keeps them too. Thread-safety: pure functions.
#ifndef METALOAD_UTIL_ERROR_KIND_H_
#define METALOAD_UTIL_ERROR_KIND_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"
#include "metaload/errors.h"

namespace metaload {

// `status` (not OK) marked as of `kind`, whatever its code says.
inline absl::Status WithErrorKind(absl::Status status, ErrorKind kind) {
  if (!status.ok()) status.SetPayload(kErrorKindUrl, absl::Cord(InfoOf(kind).name));
  return status;
}

// FailedPrecondition marked kMetaTensor: some tensor would stay, or stayed, on meta, as a
// verification found it (`metactl load`'s, `check`'s verdict).
inline absl::Status MetaTensorError(absl::string_view message) {
  return WithErrorKind(absl::FailedPreconditionError(message), ErrorKind::kMetaTensor);
}

// FailedPrecondition marked kBadInput: a model refused before anything is read (register, plan,
// a load's admission) because its skeleton and checkpoint do not match — tensors that would stay
// on meta, extras with no place. The files or flags are what to fix: exit 2, not the 3 of a
// failed verification.
inline absl::Status RefusedModelError(absl::string_view message) {
  return WithErrorKind(absl::FailedPreconditionError(message), ErrorKind::kBadInput);
}

// ResourceExhausted marked kBadInput: the request, model or plan is larger than a limit allows
// (the GPUs' memory, max_request_size, max_tensors_per_model): the input or the configuration
// is what to change, and trying again would not help.
inline absl::Status TooLargeError(absl::string_view message) {
  return WithErrorKind(absl::ResourceExhaustedError(message), ErrorKind::kBadInput);
}

// Unavailable marked kBusy: the answer is "not now, try again" (a daemon still starting, a file
// changing under its reader, a record changed by another daemon meanwhile); clients retry it.
inline absl::Status TryAgainError(absl::string_view message) {
  return WithErrorKind(absl::UnavailableError(message), ErrorKind::kBusy);
}

}  // namespace metaload

#endif  // METALOAD_UTIL_ERROR_KIND_H_
