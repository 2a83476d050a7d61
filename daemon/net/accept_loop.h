// metad's accept loop: a thread of its own (never one of gRPC's) that accepts each connection
// to the daemon's listening sockets (listen_socket.h), admits it — as not yet authenticated,
// against max_preauth_connections(_per_client) (preauth_connections.h), when the authenticated
// ones (max_connections(_per_client), connection_cap.h) leave room for it; without a
// PreauthConnections, against the connection cap itself — and hands the admitted ones to gRPC (main.cc
// passes them to gRPC's external connection acceptor, which owns each from then on and runs
// its TLS handshake). A refused connection is closed at once: its client sees it closed. A
// connection its client closed before it was accepted is closed uncounted, so a loop of
// connects and closes costs the daemon an accept and a close each, and gRPC nothing.
//
// Out of descriptors (EMFILE, or ENFILE for the whole system) a pending connection can be
// neither served nor refused: it would wait in the backlog, its client hanging until its
// deadline, and the listener would stay readable with nothing to drain. So, as nginx and libuv
// do, the loop holds one reserve descriptor (/dev/null): on EMFILE it closes it, accepts the
// connection and closes it at once (its client sees it closed and may retry), and reopens the
// reserve. It logs that at most once every 10 s, saying which limit to raise.
//
//   absl::StatusOr<std::unique_ptr<AcceptLoop>> loop = AcceptLoop::Start(
//       *std::move(sockets), &cap, preauth.get(), [&](int listener_fd, int fd) { /* fd is yours */ });
//   ...
//   (*loop)->Stop();  // before the server the connections went to shuts down
//
// Thread-safety: Start and Stop from one thread; counts() from any. The handoff and the cap
// are called on the loop's thread only.
#ifndef METALOAD_DAEMON_NET_ACCEPT_LOOP_H_
#define METALOAD_DAEMON_NET_ACCEPT_LOOP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "daemon/net/connection_cap.h"
#include "daemon/net/listen_socket.h"
#include "daemon/net/occasional_log.h"
#include "daemon/net/preauth_connections.h"

namespace metaload {

class AcceptLoop {
 public:
  // Takes an admitted connection (non-blocking, close-on-exec) and ownership of `fd`; called
  // on the loop's thread, so it must not block. `listener_fd` is the socket it came from.
  using Handoff = std::function<void(int listener_fd, int fd)>;

  // What the loop did with the connections it accepted.
  struct Counts {
    uint64_t handed_off = 0;  // admitted and handed over
    uint64_t refused = 0;     // past max_connections(_per_client) or the pre-auth caps, closed
    uint64_t shed = 0;        // accepted while out of descriptors (on the reserve, or none left to
                              // watch it with: preauth_connections.h), closed
    uint64_t gone = 0;        // closed by its client before it was accepted, closed
  };

  // Starts accepting on `sockets` on a new thread. `cap` and `preauth` (null: every connection
  // counts against `cap` as it is accepted) must outlive the loop. Error when the loop's own
  // descriptors cannot be made.
  static absl::StatusOr<std::unique_ptr<AcceptLoop>> Start(ListenSockets sockets, ConnectionCap* cap,
                                                           PreauthConnections* preauth, Handoff handoff);
  AcceptLoop(const AcceptLoop&) = delete;
  AcceptLoop& operator=(const AcceptLoop&) = delete;
  ~AcceptLoop();  // Stop()

  // Ends the loop and closes the listening sockets (connections not yet accepted are reset by
  // the kernel, new ones refused). Returns once the thread has ended: no handoff runs after.
  // Idempotent.
  void Stop();

  int port() const { return port_; }
  Counts counts() const;

 private:
  AcceptLoop(ListenSockets sockets, ConnectionCap* cap, PreauthConnections* preauth, Handoff handoff,
             int wake_fd);
  void Run();
  // Accepts what `listener` holds pending; false when the loop must back off (out of
  // descriptors with none to free, out of kernel memory, or an error it cannot act on).
  bool Drain(int listener);
  void Admit(int listener, int fd);
  // Sheds one pending connection through the reserve descriptor after accept failed with
  // `error` (EMFILE or ENFILE); false when no descriptor could be freed for it.
  bool Shed(int listener, int error);
  void LogOutOfDescriptors(int error, const std::string& what);
  // Waits `timeout_ms` or until Stop(), whichever comes first.
  void Pause(int timeout_ms);

  ListenSockets sockets_;
  const int port_;
  ConnectionCap* const cap_;
  PreauthConnections* const preauth_;  // may be null
  const Handoff handoff_;
  const int wake_fd_;                 // an eventfd: Stop() makes it readable
  int reserve_fd_ = -1;               // the loop's thread only
  OccasionalLog out_of_descriptors_;  // the loop's thread only
  OccasionalLog accept_errors_;       // the loop's thread only
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> handed_off_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> shed_{0};
  std::atomic<uint64_t> gone_{0};
  std::thread thread_;
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_NET_ACCEPT_LOOP_H_
