// Status plumbing shared by every metaload library.
//
//   ML_RETURN_IF_ERROR(WriteHeader(out));
//   ML_ASSIGN_OR_RETURN(Checkpoint ckpt, OpenCheckpoint(dir));
//   return Annotate(status, "loading shard 3 of llama-70b");
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

// Returns `status` with `context` prepended ("context: message"), same code.
inline absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
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
