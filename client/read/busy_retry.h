// Retrying a daemon's "busy, try again" (ErrorKind::kBusy: a full work queue, stream table or
// upload budget; a daemon still starting) with exponential backoff until a deadline, so that a
// rank of a 1,024-rank job that meets a full queue waits its turn instead of failing the job.
// Every other answer — success, bad input, a failure — is returned at once: retrying those
// would only repeat them.
//
//   absl::StatusOr<Assignment> plan = RetryWhileBusy(absl::Now() + timeout, [&](absl::Time deadline) {
//     return GetPlanOnce(..., deadline);
//   });
//
// Header-only (Abseil only). Thread-safety: stateless; `call` runs on the calling thread.
#ifndef METALOAD_CLIENT_READ_BUSY_RETRY_H_
#define METALOAD_CLIENT_READ_BUSY_RETRY_H_

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "metaload/errors.h"

namespace metaload {

struct BusyBackoff {
  absl::Duration first = absl::Milliseconds(50);
  absl::Duration max = absl::Seconds(2);
};

namespace busy_retry_internal {
inline const absl::Status& StatusOf(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& result) {
  return result.status();
}
}  // namespace busy_retry_internal

// Calls `call(deadline)` until it returns anything but a busy error, waiting first, 2 × first,
// … up to `backoff.max` between calls; the last busy answer is returned when the next wait
// would pass `deadline`. `sleep` is absl::SleepFor but for tests.
template <typename Call, typename Sleep = void (*)(absl::Duration)>
auto RetryWhileBusy(absl::Time deadline, Call call, BusyBackoff backoff = {}, Sleep sleep = &absl::SleepFor)
    -> decltype(call(deadline)) {
  absl::Duration wait = backoff.first;
  while (true) {
    auto result = call(deadline);
    const absl::Status& status = busy_retry_internal::StatusOf(result);
    if (status.ok() || !IsBusyError(status) || absl::Now() + wait >= deadline) return result;
    sleep(wait);
    wait = std::min(wait * 2, backoff.max);
  }
}

}  // namespace metaload

#endif  // METALOAD_CLIENT_READ_BUSY_RETRY_H_
