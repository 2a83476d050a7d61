// Reading one piece through faults: try its sources in order (source_order.h), resume a broken
// stream from the last byte that arrived, and say what failed over where. Torch-free and
// transport-free: the caller passes how one attempt reads from one source, so that tests drive
// it with fakes that break where they like.
//
//   PieceLog log;
//   absl::Status s = ReadWithFailover(sources, piece.runs, dest, attempt, policy, &health,
//                                     cancelled, &log);
//
// Thread-safety: reentrant; `health` is shared and internally locked.
#ifndef METALOAD_CLIENT_READ_FAILOVER_READ_H_
#define METALOAD_CLIENT_READ_FAILOVER_READ_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/read/source_order.h"
#include "util/strided_runs.h"

namespace metaload {

// Where a piece can be read: directly (address empty) or from a daemon.
struct ReadSource {
  std::string node;     // the daemon's node; "direct" for a direct read
  std::string address;  // host:port; empty: read the file directly
  // The name the daemon's TLS certificate must carry (FileRoute::Server::certificate); empty:
  // the address's host.
  std::string certificate;
  bool direct() const { return address.empty(); }
  std::string HealthKey(const std::string& path) const { return direct() ? "direct:" + path : address; }
};

// One switch of source while reading an item.
struct FailoverEvent {
  std::string from;  // node name, or "direct"
  std::string to;
  uint64_t at_byte = 0;  // bytes of the piece in place when it broke (the caller may rebase it)
  std::string error;     // why `from` failed
  absl::Time when;
};

// What reading one piece did, whatever its outcome.
struct PieceLog {
  std::vector<FailoverEvent> failovers;
  std::vector<std::pair<ReadSource, uint64_t>> received;  // (source, bytes kept), per attempt
};

// One request to one source: reads `runs` into `dest` and sets `*received_bytes` to the bytes
// written in order from the start of `dest`, also when it fails (what a resume keeps).
// REQUIRES: dest.size() == runs.total_bytes().
using ReadAttempt = std::function<absl::Status(const ReadSource& source, const StridedRuns& runs,
                                               absl::Span<uint8_t> dest, uint64_t* received_bytes)>;

// The rest of `runs` from byte `position` of its output on, as at most two requests a daemon
// takes: the tail of a run broken mid-way (contiguous), then the whole runs after it; nothing
// is read twice.
std::vector<StridedRuns> RunsFrom(const StridedRuns& runs, uint64_t position);

// Reads `runs` into `dest` from `sources` (in this order, those `health` saw fail lately last),
// failing over and resuming as RetryPolicy says. Only when no source can deliver does it fail:
// with the code of the last error and every source's own error ("a at 10.0.0.1:7070: ...; b at
// ...: ..."). A load cancelled via `cancelled` stops at once. REQUIRES: sources non-empty;
// dest.size() == runs.total_bytes().
absl::Status ReadWithFailover(const std::vector<ReadSource>& sources, const StridedRuns& runs,
                              absl::Span<uint8_t> dest, const ReadAttempt& attempt, const RetryPolicy& policy,
                              SourceHealth* health, const std::string& path,
                              const std::atomic<bool>* cancelled, PieceLog* log);

}  // namespace metaload

#endif  // METALOAD_CLIENT_READ_FAILOVER_READ_H_
