// The daemon's listening sockets: `listen: host:port` bound and listening by metad itself, so
// that it owns accept() (accept_loop.h) instead of gRPC.
//
// Bound as gRPC's own listener bound them: the host is resolved, and each address it names is
// bound (`localhost` is 127.0.0.1 and ::1; at least one must bind, as gRPC required); port 0
// lets the kernel pick a free port, the same one for every address; a wildcard host
// (`0.0.0.0`, `[::]`) is one dual-stack IPv6 socket, or IPv4 alone on a host without IPv6.
// SO_REUSEADDR is on (a restarted daemon binds again although its old connections linger in
// TIME_WAIT); SO_REUSEPORT is off (a second metad on a port in use fails to start instead of
// answering half the calls). The sockets are non-blocking and close-on-exec.
//
//   absl::StatusOr<ListenSockets> sockets = ListenSockets::Open("127.0.0.1:0");
//   if (sockets.ok()) std::cout << sockets->port();
//
// Thread-safety: const methods may be called from any thread; the destructor closes the
// descriptors (nothing may poll them then).
#ifndef METALOAD_DAEMON_NET_LISTEN_SOCKET_H_
#define METALOAD_DAEMON_NET_LISTEN_SOCKET_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace metaload {

class ListenSockets {
 public:
  // Binds and listens on `address` ("host:port", "[v6]:port"). Error (UNAVAILABLE) when no
  // address of the host could be bound: the port is in use, or the host is not an address of
  // this machine, or it does not resolve; the message says which, for each address.
  static absl::StatusOr<ListenSockets> Open(absl::string_view address);

  ListenSockets(ListenSockets&& other) noexcept;
  ListenSockets& operator=(ListenSockets&& other) noexcept;
  ListenSockets(const ListenSockets&) = delete;
  ListenSockets& operator=(const ListenSockets&) = delete;
  ~ListenSockets();

  // The listening descriptors, one per bound address (at least one).
  const std::vector<int>& fds() const { return fds_; }
  // The port every socket is bound to (the kernel's pick for `host:0`).
  int port() const { return port_; }

  // Closes the sockets now (the destructor does otherwise); fds() is empty after.
  void Close();

 private:
  ListenSockets() = default;

  std::vector<int> fds_;
  int port_ = 0;
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_NET_LISTEN_SOCKET_H_
