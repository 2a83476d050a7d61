// Keeps a node agent a member of its coordinator's cluster: a thread of its own (never a gRPC
// thread) joins, retrying every second until the coordinator answers, then re-joins every two
// seconds so that the agent stays a live member (membership.h) and a restarted coordinator
// learns it again. Failures are logged once until they change.
//
//   Joiner joiner([&](absl::Duration timeout, bool leaving) {
//     return agent.JoinCoordinator(timeout, leaving); });
//   ...
//   joiner.Leave();  // on SIGTERM
//
// Thread-safety: Leave and the destructor from one thread; `join` is called from the joiner's
// thread, and by Leave from the caller's.
#ifndef METALOAD_DAEMON_MEMBERSHIP_JOINER_H_
#define METALOAD_DAEMON_MEMBERSHIP_JOINER_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace metaload {

class Joiner {
 public:
  // Joins (or re-joins) the coordinator within `timeout`; with `leaving`, tells it this daemon
  // is stopping. Blocks.
  using Join = std::function<absl::Status(absl::Duration timeout, bool leaving)>;

  // Starts the thread; `join` must stay callable until Leave or the destructor returns.
  explicit Joiner(Join join);
  ~Joiner();  // stops re-joining, without a word to the coordinator

  // Stops re-joining and tells the coordinator this daemon is leaving, so that plans made from
  // now on list other servers (a coordinator that does not answer expires it after
  // member_timeout instead).
  void Leave();

 private:
  void Run();
  void Stop();

  const Join join_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_MEMBERSHIP_JOINER_H_
