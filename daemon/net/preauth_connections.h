// Connections that have not authenticated yet: a short leash of their own (issue 35: 512
// connections that sent the HTTP/2 preface and nothing else held every connection slot, for
// gRPC's 10 minute idle timeout); and, once authenticated, a cut for stream-reset floods.
//
// Every connection metad accepts starts here (accept_loop.h): it counts against
// max_preauth_connections, and max_preauth_connections_per_client from its host, and not
// against max_connections(_per_client) (connection_cap.h), so that connections that never
// authenticate cannot take the slots of those that do. Past a host's share a new connection is
// refused; past max_preauth_connections the oldest is closed instead, so that hosts that fill
// it cannot keep a new client out either. Its first call that passes
// authentication (the token on its headers, checked by security/auth_processor.h; the TLS
// handshake before it) moves it to the connection cap — refused there, it is closed. A
// connection that has made no such call within preauth_timeout (its TLS handshake included)
// is closed. So is one whose client has sent more than max_preauth_bytes before such a call
// (checked every 100 ms): the HTTP/2 rapid reset attack without a token sends ~2 MB/s of
// HEADERS + RST_STREAM pairs, each refused on its headers, and under gRPC 1.51 the work they
// make can hold the executor thread that other connections' work queues behind, so that an
// authenticated client waited the whole preauth_timeout (8 s of 10 in 3 runs of 4, measured by
// tests/integration/robustness/test_preauth_connections.py). What marks a connection
// authenticated is its first call reaching the service (metad's interceptor), which for a
// unary call gRPC does once the call's message has arrived whole: so the budget also closes a
// connection whose calls carry the token but whose messages never end. A client sends its
// preface, settings, that call's headers and its first message before then: at most what one
// stream's HTTP/2 window lets it send (gRPC 1.51 grants ~4 MiB), when gRPC is slow to hand the
// call over (a busy daemon); kilobytes in the common case (a unary message is at most 128 KiB;
// an upload reaches the service at its headers). The default is twice that window.
//
// Once authenticated, a connection is watched for the HTTP/2 rapid reset attack
// (CVE-2023-44487), which gRPC 1.51 does not limit: one whose client resets at least 500 calls
// within 10 s, and more than it completes, is closed (CallEnded; metad's server interceptor
// reports each call's end, and whether its client reset it).
//
// How a connection gRPC owns is closed. gRPC may close its descriptor on any of its threads at
// any moment, after which the number can name another socket: shutdown(2) on gRPC's number
// could cut an innocent connection (and ThreadSanitizer reports the race). So Admit keeps a
// duplicate of the descriptor, which is ours alone, for as long as the connection lives:
// shutdown on the duplicate shuts the socket both hold, gRPC's poller sees it hung up
// (EPOLLHUP) and gRPC tears the connection down as if its client had closed it. The duplicate
// is closed as soon as the connection hangs up (gRPC shuts a socket down before it closes it:
// POLLHUP here), so that it never keeps a socket gRPC dropped alive for long; gRPC's epoll
// registration of a descriptor it closed first lingers until then, which gRPC 1.51's epoll1
// poller tolerates (it never frees its per-descriptor state, and a spurious wake-up reads
// EAGAIN). Every connection therefore holds two descriptors.
//
// gRPC names the connection of a call by its client's address and port (ServerContext::peer(),
// peer_address.h), which is how Authenticated and CallEnded find it.
//
//   absl::StatusOr<std::unique_ptr<PreauthConnections>> preauth =
//       PreauthConnections::Start(limits, &connection_cap);
//   int error;
//   if ((*preauth)->Admit(fd, &error) == kAdmitted) hand fd to gRPC;  // the accept loop
//   (*preauth)->Authenticated(server_context->peer());  // each call past authentication, as it starts
//   (*preauth)->CallEnded(server_context->peer(), server_context->IsCancelled());  // as it ends
//
// Thread-safety: Admit from one thread (the accept loop's); Authenticated, CallEnded and counts()
// from any. A thread of its own watches the duplicates and the deadlines.
#ifndef METALOAD_DAEMON_NET_PREAUTH_CONNECTIONS_H_
#define METALOAD_DAEMON_NET_PREAUTH_CONNECTIONS_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/net/connection_cap.h"
#include "daemon/net/occasional_log.h"

namespace metaload {

struct PreauthLimits {
  uint32_t max_total = 256;                    // max_preauth_connections
  uint32_t max_per_client = 64;                // max_preauth_connections_per_client
  absl::Duration timeout = absl::Seconds(10);  // preauth_timeout
  uint64_t max_bytes = 8 << 20;                // max_preauth_bytes
};

class PreauthConnections {
 public:
  struct Counts {
    uint64_t admitted = 0;       // accepted here
    uint64_t refused = 0;        // past max_preauth_connections_per_client, not accepted
    uint64_t evicted = 0;        // the oldest, closed to admit one past max_preauth_connections
    uint64_t authenticated = 0;  // moved to the connection cap
    uint64_t over_cap = 0;       // authenticated but past max_connections(_per_client): closed
    uint64_t timed_out = 0;      // closed after preauth_timeout
    uint64_t oversized = 0;      // closed for sending more than max_preauth_bytes unauthenticated
    uint64_t hung_up = 0;        // closed by its client or by gRPC
    uint64_t reset_floods = 0;   // authenticated, closed for resetting calls faster than completing them
  };

  // `authenticated` must outlive this. Error when the watcher's descriptors cannot be made.
  static absl::StatusOr<std::unique_ptr<PreauthConnections>> Start(PreauthLimits limits,
                                                                   ConnectionCap* authenticated);
  PreauthConnections(const PreauthConnections&) = delete;
  PreauthConnections& operator=(const PreauthConnections&) = delete;
  ~PreauthConnections();  // Stop()

  // Whether accepted socket `fd` may be handed to gRPC: the connection cap has room for its host
  // (else refused and logged there) and so does max_preauth_connections_per_client (else
  // refused, logged at most once every 10 s). When max_preauth_connections are held, the oldest
  // of them is closed to make room (logged likewise). Counts it here and keeps a duplicate of
  // `fd` when it may. kNoDescriptor (with EMFILE or ENFILE in `*error`): no descriptor was left
  // for the duplicate, and the connection must be closed as one accepted out of descriptors.
  enum class Admission { kAdmitted, kRefused, kNoDescriptor };
  Admission Admit(int fd, int* error);

  // A call from `grpc_peer` (gRPC's ServerContext::peer()) passed authentication: its
  // connection, if still here, moves to the connection cap now (closed when the cap refuses it).
  // Cheap when it is not here (every later call of a connection).
  void Authenticated(absl::string_view grpc_peer);

  // A call from `grpc_peer` ended: reset by its client (`reset`: cancelled before it completed)
  // or completed. An authenticated connection that resets at least 500 calls within 10 s, and
  // more than it completes, is closed (the HTTP/2 rapid reset attack, CVE-2023-44487, which
  // gRPC 1.51 does not limit).
  void CallEnded(absl::string_view grpc_peer, bool reset);

  // Closes the duplicates (the connections stay gRPC's) and ends the watcher. Idempotent.
  void Stop();

  // Connections not yet authenticated.
  uint32_t open() const;
  Counts counts() const;

 private:
  struct Entry {
    int duplicate_fd = -1;
    ino_t inode = 0;
    std::string host;
    absl::Time deadline;  // preauth_timeout, until it authenticates
    bool authenticated = false;
    // Once authenticated: its calls reset by the client and completed since window_start.
    absl::Time window_start;
    uint32_t resets = 0;
    uint32_t completed = 0;
  };

  PreauthConnections(PreauthLimits limits, ConnectionCap* authenticated, int wake_fd);
  void Run();
  // Closes every entry that hung up (`hung_up`: addresses), is past its deadline, or has received
  // more than max_preauth_bytes; returns when to look again.
  absl::Time SettleLocked(const std::vector<std::string>& hung_up, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropLocked(const std::string& address, bool shut_down) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // No longer counts `entry` (not yet authenticated) against the pre-auth caps.
  void ReleaseShareLocked(const Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes the connection here longest, to admit one from `for_host`.
  void EvictOldestLocked(const std::string& for_host) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Wake();

  const PreauthLimits limits_;
  ConnectionCap* const authenticated_;
  const int wake_fd_;  // an eventfd: Admit(), Authenticated() and Stop() make it readable
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> by_address_ ABSL_GUARDED_BY(mu_);   // SocketPeerAddress
  absl::flat_hash_map<std::string, uint32_t> per_host_ ABSL_GUARDED_BY(mu_);  // waiting ones
  uint32_t waiting_ ABSL_GUARDED_BY(mu_) = 0;                                 // not yet authenticated
  Counts counts_ ABSL_GUARDED_BY(mu_);
  OccasionalLog refusals_ ABSL_GUARDED_BY(mu_);
  OccasionalLog timeouts_ ABSL_GUARDED_BY(mu_);
  OccasionalLog oversized_ ABSL_GUARDED_BY(mu_);
  OccasionalLog evictions_ ABSL_GUARDED_BY(mu_);
  OccasionalLog reset_floods_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_NET_PREAUTH_CONNECTIONS_H_
