// Which TCP sockets are still open, asked of the kernel (sock_diag netlink) rather than through
// file descriptors: metad's connection count (connection_cap.h) must not touch descriptors gRPC
// may be closing on another thread, where a number can name another socket a moment later
// (ThreadSanitizer reported exactly that race when the count used fstat).
#ifndef METALOAD_DAEMON_NET_TCP_SOCKETS_H_
#define METALOAD_DAEMON_NET_TCP_SOCKETS_H_

#include <sys/types.h>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"

namespace metaload {

// The inodes of this network namespace's TCP sockets (IPv4 and IPv6) that some process still
// holds open: a socket whose last descriptor was closed is gone from the set, though the
// kernel may keep its connection (FIN_WAIT, TIME_WAIT) a while. Error when the kernel refuses
// the query (no NETLINK_SOCK_DIAG); RESOURCE_EXHAUSTED when it could not be asked for now (the
// process is out of descriptors).
absl::StatusOr<absl::flat_hash_set<ino_t>> OpenTcpSocketInodes();

}  // namespace metaload

#endif  // METALOAD_DAEMON_NET_TCP_SOCKETS_H_
