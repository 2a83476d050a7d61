// Status plumbing shared by every metaload library.
//
//   ML_RETURN_IF_ERROR(WriteHeader(out));
//   ML_ASSIGN_OR_RETURN(Checkpoint ckpt, OpenCheckpoint(dir));
//   return Annotate(status, "loading shard 3 of llama-70b");
//   return Restated(status, absl::StatusCode::kUnauthenticated, "what to fix");
//
// Abseil 20220623 (Debian 12) has no status macros of its own.
#ifndef METALOAD_UTIL_STATUS_MACROS_H_
#define METALOAD_UTIL_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace metaload {

// A new status of `code` and `message` that keeps `status`'s payloads (such as its ErrorKind,
// util/error_kind.h): what a caller that rewrites a message must use to keep its kind.
inline absl::Status Restated(const absl::Status& status, absl::StatusCode code, absl::string_view message) {
  absl::Status restated(code, message);
  status.ForEachPayload(
      [&](absl::string_view type_url, const absl::Cord& payload) { restated.SetPayload(type_url, payload); });
  return restated;
}

// Returns `status` with `context` prepended ("context: message"), same code and payloads.
inline absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return Restated(status, status.code(), absl::StrCat(context, ": ", status.message()));
}

}  // namespace metaload

#define ML_STATUS_CONCAT_INNER_(a, b) a##b
#define ML_STATUS_CONCAT_(a, b) ML_STATUS_CONCAT_INNER_(a, b)

#define ML_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status ml_status_ = (expr);      \
    if (!ml_status_.ok()) return ml_status_; \
  } while (0)

#define ML_ASSIGN_OR_RETURN(lhs, expr) \
  ML_ASSIGN_OR_RETURN_IMPL_(ML_STATUS_CONCAT_(ml_statusor_, __LINE__), lhs, expr)

#define ML_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#endif  // METALOAD_UTIL_STATUS_MACROS_H_
