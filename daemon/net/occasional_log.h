// A warning logged at most once per interval, counting the events between lines: a flood of
// refused connections must not flood the log too (connection_cap.h, accept_loop.h).
//
//   OccasionalLog refusals(absl::Seconds(10));
//   if (uint64_t n = refusals.Count(absl::Now())) LogWarning(absl::StrCat(..., n, " since"));
//
// Thread-safety: none; its owner serializes the calls.
#ifndef METALOAD_DAEMON_NET_OCCASIONAL_LOG_H_
#define METALOAD_DAEMON_NET_OCCASIONAL_LOG_H_

#include <cstdint>

#include "absl/time/time.h"

namespace metaload {

class OccasionalLog {
 public:
  explicit OccasionalLog(absl::Duration interval) : interval_(interval) {}

  // Counts one event at `now`. Returns 0 when no line is due; else a line is due, and the
  // number of events it stands for (this one and those counted since the last line).
  uint64_t Count(absl::Time now) {
    ++unlogged_;
    if (now - last_line_ < interval_) return 0;
    last_line_ = now;
    const uint64_t events = unlogged_;
    unlogged_ = 0;
    return events;
  }

 private:
  const absl::Duration interval_;
  absl::Time last_line_ = absl::InfinitePast();
  uint64_t unlogged_ = 0;
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_NET_OCCASIONAL_LOG_H_
