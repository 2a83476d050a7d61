// How many connections a daemon holds: at most max_connections in all and
// max_connections_per_client from one client host (node config; docs/node-config.md, "Limits
// and memory"). Each connection costs a file descriptor and gRPC's per-connection buffers, and
// gRPC 1.51 bounds neither.
//
// Admit() is handed every socket metad accepts (accept_loop.h), on the accepting thread and
// before gRPC owns or reads it; a socket it refuses is closed there (the client sees the
// connection closed). gRPC closes a connection without telling us, so a connection counts
// while the kernel still lists its socket (by inode, tcp_sockets.h) as open: never by touching
// the descriptor once gRPC owns it, since gRPC may be closing it on another thread meanwhile
// (ThreadSanitizer reported that race when this used fstat). Closed entries are dropped when a
// limit would refuse (at most every 100 ms, or once a quarter of max_connections_per_client
// were admitted since the last look, so a flood of refused connects costs no more, and one of
// connects and closes cannot keep a host out) and by Prune(), which metad calls once a second
// off gRPC's threads.
//
// Thread-safety: every method may be called from any thread.
#ifndef METALOAD_DAEMON_NET_CONNECTION_CAP_H_
#define METALOAD_DAEMON_NET_CONNECTION_CAP_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/net/occasional_log.h"

namespace metaload {

class ConnectionCap {
 public:
  ConnectionCap(uint32_t max_total, uint32_t max_per_client);

  // Whether accepted socket `fd` may stay open; counts it when it may. A refusal is logged
  // (at most once every 10 s, with the number refused since).
  bool Admit(int fd);
  // The same for the socket with inode `inode`, whose peer is `host` (SocketPeerHost): a
  // connection counted once it authenticated (preauth_connections.h), after it was accepted.
  bool Admit(ino_t inode, std::string host);
  // Whether a connection from `host` would be admitted now, without counting it; logged as
  // Admit logs a refusal. A connection not yet authenticated is refused at once when the
  // authenticated ones leave no room for it.
  bool HasRoom(const std::string& host);

  // Drops the entries whose socket gRPC has closed.
  void Prune();

  // Connections open now, as last pruned.
  uint32_t open() const;

  // max_connections.
  uint32_t max_total() const { return max_total_; }

 private:
  // The key a connection from `host` would pass (nullptr: none), after a prune when one is due.
  const char* RefusalLocked(const std::string& host) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PruneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Forget(ino_t inode) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LogRefusalLocked(const std::string& host, const char* key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint32_t max_total_;
  const uint32_t max_per_client_;
  const uint32_t admissions_per_prune_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<ino_t, std::string> by_inode_ ABSL_GUARDED_BY(mu_);  // socket -> peer host
  absl::flat_hash_map<std::string, uint32_t> per_host_ ABSL_GUARDED_BY(mu_);
  bool warned_no_sock_diag_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_prune_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint32_t admitted_since_prune_ ABSL_GUARDED_BY(mu_) = 0;
  OccasionalLog refusals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_NET_CONNECTION_CAP_H_
