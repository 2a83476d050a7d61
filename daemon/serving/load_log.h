// The loads a daemon takes part in, as it sees them: one line when a model's load begins here
// and one when it ends, with what this daemon did for it (docs/running-a-cluster.md, "Logs").
//
// A daemon sees two things of a load: ranks asking their plans (the coordinator or a peer
// answers GetPlan; an agent only forwards) and ReadRange streams of the model's files (any
// daemon whose roots hold them). Ranks that read their files directly, and the fan-out between
// ranks, never reach a daemon, and no rank reports its end: so a load begins here with the first
// plan or stream of its model, and ends once none has been asked or in flight for `quiet`. The
// rank's own summary (`metactl load`, the Python report) says the whole load.
//
//   LoadLog loads(LoadLog::Options{});
//   loads.PlanAnswered({"big", 8, 0, "layers", [&] { return total; }, "10.0.0.7"});  // coordinator
//   loads.StreamOpened("big", "10.0.0.7");  ...  loads.StreamEnded({"big", "10.0.0.7", path, sent, length});
//   loads.EndQuiet();                                    // once a second (daemon/metad_main.cc)
//
// A stream cut short (its reader went away: it failed over, or stopped) or failed (a read
// error) is a warning line of its own, at most one per 10 s of each kind with the count since
// (daemon/net/occasional_log.h): a rank stopped with 64 streams in flight writes one line.
//
// Only what a daemon already admitted is counted: a plan it answered, a stream of a registered
// model whose file it opened. At most `max_loads` models are followed at once (past that a
// load goes unlogged), and a rank set per load of at most its world size.
//
// Thread-safety: every method may be called from any thread (one internal mutex; lines are
// written without it).
#ifndef METALOAD_DAEMON_SERVING_LOAD_LOG_H_
#define METALOAD_DAEMON_SERVING_LOAD_LOG_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/net/occasional_log.h"

namespace metaload {

// A rank's GetPlan this daemon answered.
struct PlanAsked {
  std::string model;
  int32_t world_size = 0;
  int32_t rank = 0;
  std::string strategy;
  // Every rank's items together: asked only when the load begins or its plan changes (a sum
  // over the world's ranks is not paid per rank).
  std::function<uint64_t()> planned_bytes;
  std::string host;  // the caller's (stream_table.h PeerHost)
};

// How a ReadRange stream this daemon opened ended.
enum class StreamEnd { kComplete, kCancelled, kFailed };
struct StreamEnding {
  std::string model;
  std::string host;  // the reader's
  std::string path;
  uint64_t sent_bytes = 0;    // handed to gRPC
  uint64_t length_bytes = 0;  // asked for
  StreamEnd how = StreamEnd::kComplete;
  std::string reason;  // kFailed: the read's error
};

class LoadLog {
 public:
  struct Options {
    // A load ends once nothing of it was asked or in flight this long.
    absl::Duration quiet = absl::Seconds(2);
    size_t max_loads = 1024;  // models followed at once (a daemon holds at most max_models)
  };

  explicit LoadLog(
      Options options, std::function<absl::Time()> clock = [] { return absl::Now(); });

  void PlanAnswered(const PlanAsked& asked);
  void StreamOpened(const std::string& model, const std::string& host);
  // REQUIRES: StreamOpened(ended.model, ...) before.
  void StreamEnded(const StreamEnding& ended);
  // Logs the end of every load quiet for `quiet`, and forgets it.
  void EndQuiet();
  // Logs the end of every load still open, in flight or not: the daemon stops.
  void EndAll();

 private:
  struct Load {
    absl::Time begun;
    absl::Time last_active;  // the last plan answered, stream opened or ended
    int32_t world_size = 0;  // of the last plan asked
    std::string strategy;
    uint64_t planned_bytes = 0;
    std::vector<bool> ranks_asked;  // by rank, world_size of them
    int32_t ranks_asked_count = 0;
    uint32_t streams_in_flight = 0;
    uint64_t streams = 0, streams_cut = 0, streams_failed = 0;
    uint64_t served_bytes = 0;
    absl::flat_hash_set<std::string> hosts;  // at most kMaxHosts counted
  };

  // The load of `model`, begun now (and logged, after the lock is let go: `begun` is set) if
  // none is open; nullptr past max_loads.
  Load* FindOrBegin(const std::string& model, absl::Time now, bool* begun) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Logs the end of the loads quiet for `quiet` (all of them: `all`), and forgets them.
  void End(absl::Duration quiet, bool all);

  const Options options_;
  const std::function<absl::Time()> clock_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Load> loads_ ABSL_GUARDED_BY(mu_);
  OccasionalLog cut_lines_ ABSL_GUARDED_BY(mu_){absl::Seconds(10)};
  OccasionalLog failed_lines_ ABSL_GUARDED_BY(mu_){absl::Seconds(10)};
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVING_LOAD_LOG_H_
