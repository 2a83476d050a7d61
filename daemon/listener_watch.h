// Keeping metad reachable when it runs out of file descriptors.
//
// gRPC 1.51 (Debian 12's) stops polling its listening socket for good after accept4() fails
// with EMFILE ("Failed accept4: Too many open files"): the kernel still completes TCP
// handshakes into the socket's backlog, but nothing accepts them, so every later client hangs
// until its deadline although the daemon is alive. Measured: 150 connections against a daemon
// limited to 100 descriptors left it unreachable after they closed. (gRPC has no option that
// caps connections in that version.) So metad (1) raises its soft descriptor limit to the hard
// one at start, and (2) watches its listening socket: a backlog that stays non-empty for
// several seconds means nobody accepts, and the server is rebuilt on the same port.
#ifndef METALOAD_DAEMON_LISTENER_WATCH_H_
#define METALOAD_DAEMON_LISTENER_WATCH_H_

#include <cstdint>
#include <string>

namespace metaload {

struct FdLimit {
  uint64_t soft = 0;
  uint64_t hard = 0;
};
// Raises RLIMIT_NOFILE's soft limit to its hard limit; returns the limits now in force.
FdLimit RaiseFdLimit();
// Descriptors this process has open (entries of /proc/self/fd); -1 when unreadable.
int64_t OpenFdCount();

// Connections waiting in the accept backlog of this network namespace's listening TCP
// socket on `port` (IPv4 or IPv6, /proc/net/tcp's rx_queue of a LISTEN socket);
// kNotListening when no socket listens on it; kUnknown when /proc cannot be read (as when
// the process is out of descriptors).
inline constexpr int64_t kNotListening = -1;
inline constexpr int64_t kUnknown = -2;
int64_t ListenBacklog(int port);

// Decides, one sample a second, when a listener has stopped accepting.
class ListenerWatch {
 public:
  explicit ListenerWatch(int stalled_samples = 3) : stalled_samples_(stalled_samples) {}
  // Feeds one ListenBacklog sample; true when the listener must be rebuilt: it is gone, or
  // connections have waited in its backlog for `stalled_samples` samples in a row (a working
  // gRPC server accepts them within microseconds). kUnknown samples are skipped.
  bool Stalled(int64_t backlog);

 private:
  const int stalled_samples_;
  int waiting_ = 0;
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_LISTENER_WATCH_H_
