// Where a rank reads a piece from, and what it does when a source fails: the pure policy under
// failover_read.h (no I/O, no clock of its own: callers pass the time).
//
// A piece's sources are, in order: a direct read when this host can open the file, this node's
// daemon, then the other servers as the coordinator ordered them (least loaded first). Sources
// that failed lately (SourceHealth) go last, so that the pieces after a daemon died do not each
// find that out again. A failed attempt moves on to the next source at once; coming back to a
// source that already failed waits, exponentially longer each time (RetryPolicy). An attempt
// that delivered bytes before breaking starts the count afresh: the stream resumes from the
// last byte received, and it made progress.
//
//   SourceCursor cursor(sources.size(), RetryPolicy{});
//   for (;;) {
//     absl::Status s = Read(sources[cursor.current()], ...);
//     if (s.ok()) break;
//     RetryStep step = cursor.OnFailure(s.code(), /*progressed=*/received > 0);
//     if (step.give_up) return ...;
//     absl::SleepFor(step.backoff);
//   }
//
// Thread-safety: SourceCursor is one piece's, used by one thread; SourceHealth is internally
// locked and shared by every reader thread.
#ifndef METALOAD_CLIENT_READ_SOURCE_ORDER_H_
#define METALOAD_CLIENT_READ_SOURCE_ORDER_H_

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace metaload {

// What a failed read says about where to read next.
enum class ReadFailure {
  kRetry,     // the source or the path to it broke (UNAVAILABLE, DEADLINE_EXCEEDED, reset, ...)
  kDataLoss,  // bytes arrived wrong: another source may hold them right, once
  kFatal,     // the request's fault (INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED,
              // FAILED_PRECONDITION, OUT_OF_RANGE): every source would say the same
};
ReadFailure ClassifyReadFailure(absl::StatusCode code);

struct RetryPolicy {
  int rounds = 3;        // times every source is tried, counted from the last progress
  int min_attempts = 6;  // at least this many attempts: one server gets time to restart
  absl::Duration first_backoff = absl::Milliseconds(100);  // before the first repeat of a source
  absl::Duration max_backoff = absl::Milliseconds(1600);   // doubled each repeat up to this
};

struct RetryStep {
  bool give_up = false;
  size_t next = 0;                                // the source to try next
  absl::Duration backoff = absl::ZeroDuration();  // to wait before trying it
};

// One piece's way through its sources (indexes 0 .. source_count - 1, in the order to try).
class SourceCursor {
 public:
  // REQUIRES: source_count >= 1.
  SourceCursor(size_t source_count, RetryPolicy policy);

  size_t current() const { return current_; }
  // After the current source failed with `code`; `progressed`: the attempt delivered bytes.
  RetryStep OnFailure(absl::StatusCode code, bool progressed);

 private:
  const size_t count_;
  const RetryPolicy policy_;
  size_t current_ = 0;
  int failures_ = 0;  // since the last progress
  bool data_loss_retried_ = false;
};

// Which servers failed lately, shared by a fill's reader threads: a server that failed less than
// `cooldown` ago is tried after the others (still tried: it may have restarted).
class SourceHealth {
 public:
  // 10 s: long enough that a daemon that hangs (each try costs a stall timeout) is not tried
  // first again within a load, short enough that one restarted is soon preferred again.
  explicit SourceHealth(absl::Duration cooldown = absl::Seconds(10)) : cooldown_(cooldown) {}

  void MarkFailed(const std::string& source, absl::Time now);
  void MarkOk(const std::string& source);
  // `sources` (keys as passed to MarkFailed) stably reordered: healthy first.
  std::vector<size_t> Order(const std::vector<std::string>& sources, absl::Time now) const;

  // A piece gave up on all of `sources`. Until `cooldown` has passed without one of them
  // answering, the next pieces of the same sources try each once instead of waiting through
  // every backoff again: a load whose only server died fails in seconds, not pieces x seconds.
  void MarkGaveUp(const std::vector<std::string>& sources, absl::Time now);
  bool GaveUpLately(const std::vector<std::string>& sources, absl::Time now) const;

 private:
  const absl::Duration cooldown_;
  mutable absl::Mutex mu_;
  std::map<std::string, absl::Time> failed_at_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Time> gave_up_at_ ABSL_GUARDED_BY(mu_);
};

}  // namespace metaload

#endif  // METALOAD_CLIENT_READ_SOURCE_ORDER_H_
