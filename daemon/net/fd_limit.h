// metad's file descriptor limit: every connection and open file takes a descriptor, and
// systemd's default soft limit (1,024) is far below what a daemon serving hundreds of ranks
// needs. metad raises its soft limit to the hard one at start and logs both; running out
// anyway is handled where connections are accepted (accept_loop.h's reserve descriptor).
//
// Thread-safety: may be called from any thread.
#ifndef METALOAD_DAEMON_NET_FD_LIMIT_H_
#define METALOAD_DAEMON_NET_FD_LIMIT_H_

#include <cstdint>

namespace metaload {

struct FdLimit {
  uint64_t soft = 0;
  uint64_t hard = 0;
};
// Raises RLIMIT_NOFILE's soft limit to its hard limit; returns the limits now in force.
FdLimit RaiseFdLimit();

}  // namespace metaload

#endif  // METALOAD_DAEMON_NET_FD_LIMIT_H_
