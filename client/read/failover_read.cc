#include "client/read/failover_read.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/identifiers.h"
#include "util/log.h"

namespace metaload {
namespace {

// Short: a stream's own error names the server's address and the path already, and the
// verdict has room for only a few kilobytes of findings.
std::string Describe(const ReadSource& source) { return source.direct() ? "direct read" : source.node; }

bool Cancelled(const std::atomic<bool>* cancelled) { return cancelled != nullptr && cancelled->load(); }

// Waits `wait`, in short steps so that a cancelled load is not held up by a backoff.
void Backoff(absl::Duration wait, const std::atomic<bool>* cancelled) {
  const absl::Time until = absl::Now() + wait;
  for (absl::Time now = absl::Now(); now < until && !Cancelled(cancelled); now = absl::Now()) {
    absl::SleepFor(std::min(until - now, absl::Milliseconds(20)));
  }
}

}  // namespace

std::vector<StridedRuns> RunsFrom(const StridedRuns& runs, uint64_t position) {
  std::vector<StridedRuns> rest;
  if (runs.run_bytes == 0 || position >= runs.total_bytes()) return rest;
  uint64_t run = position / runs.run_bytes;
  const uint64_t within = position % runs.run_bytes;
  if (within > 0) {
    const uint64_t tail = runs.run_bytes - within;
    rest.push_back(StridedRuns{runs.first_offset + run * runs.stride_bytes + within, tail, tail, 1});
    ++run;
  }
  if (run < runs.run_count) {
    rest.push_back(StridedRuns{runs.first_offset + run * runs.stride_bytes, runs.run_bytes, runs.stride_bytes,
                               runs.run_count - run});
  }
  return rest;
}

absl::Status ReadWithFailover(const std::vector<ReadSource>& given, const StridedRuns& runs,
                              absl::Span<uint8_t> dest, const ReadAttempt& attempt, const RetryPolicy& policy,
                              SourceHealth* health, const std::string& path,
                              const std::atomic<bool>* cancelled, PieceLog* log) {
  if (given.empty()) return absl::NotFoundError(absl::StrCat("no source can read ", path));
  std::vector<std::string> keys;
  for (const ReadSource& s : given) keys.push_back(s.HealthKey(path));
  std::vector<ReadSource> sources;
  for (size_t i : health->Order(keys, absl::Now())) sources.push_back(given[i]);

  RetryPolicy effective = policy;
  if (health->GaveUpLately(keys, absl::Now())) effective.rounds = effective.min_attempts = 1;
  SourceCursor cursor(sources.size(), effective);
  std::vector<std::string> errors(sources.size());  // each source's last error
  uint64_t done = 0;
  for (;;) {
    const size_t s = cursor.current();
    const ReadSource& source = sources[s];
    const uint64_t before = done;
    absl::Status status;
    for (const StridedRuns& part : RunsFrom(runs, done)) {
      uint64_t received = 0;
      status = attempt(source, part, dest.subspan(done, part.total_bytes()), &received);
      done += std::min(received, part.total_bytes());
      if (!status.ok()) break;
      if (received != part.total_bytes()) {  // an attempt that says OK must have delivered all
        status = absl::DataLossError(
            absl::StrCat("read ended after ", received, " of ", part.total_bytes(), " bytes"));
        break;
      }
    }
    if (done > before) log->received.emplace_back(source, done - before);
    if (status.ok()) {
      health->MarkOk(source.HealthKey(path));
      return absl::OkStatus();
    }
    if (Cancelled(cancelled)) return absl::CancelledError("the load was cancelled");
    errors[s] = absl::StrCat(Describe(source), ": ", status.message());
    const RetryStep step = cursor.OnFailure(status.code(), done > before);
    if (ClassifyReadFailure(status.code()) != ReadFailure::kFatal) {
      health->MarkFailed(source.HealthKey(path), absl::Now());
    }
    if (step.give_up) {
      // The request's own fault: every source would say the same, so only this one is named.
      if (ClassifyReadFailure(status.code()) == ReadFailure::kFatal)
        return absl::Status(status.code(), errors[s]);
      health->MarkGaveUp(keys, absl::Now());
      std::vector<std::string> tried;
      for (const std::string& e : errors) {
        if (!e.empty()) tried.push_back(e);
      }
      return absl::Status(status.code(),
                          absl::StrCat("every source failed (", done, " of ", runs.total_bytes(),
                                       " bytes in place): ", absl::StrJoin(tried, "; ")));
    }
    log->failovers.push_back(FailoverEvent{source.node, sources[step.next].node, done,
                                           std::string(status.message()), absl::Now()});
    // The rank's own line of it, as it happens (the load's report lists them all at its end).
    const ReadSource& next = sources[step.next];
    Log(LogLevel::kWarning,
        absl::StrCat("failing over: ", QuoteForMessage(path, 512), " from ", Describe(source),
                     " broke after ", done, " of ", runs.total_bytes(), " bytes (", status.message(),
                     "); resuming on ", Describe(next)),
        {{"event", "failover"},
         {"path", path},
         {"from", source.node},
         {"to", next.node},
         {"at_byte", done},
         {"length_bytes", runs.total_bytes()},
         {"reason", status.message()}});
    Backoff(step.backoff, cancelled);
    if (Cancelled(cancelled)) return absl::CancelledError("the load was cancelled");
  }
}

}  // namespace metaload
