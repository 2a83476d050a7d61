#include "daemon/net/tcp_sockets.h"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace metaload {
namespace {

// Closes the descriptor on every return.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

absl::Status DumpFamily(int family, absl::flat_hash_set<ino_t>& inodes) {
  Fd sock{::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG)};
  if (sock.fd < 0) {
    const std::string message = absl::StrCat("sock_diag socket: ", std::strerror(errno));
    // Out of descriptors or memory for now, not a kernel without sock_diag.
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      return absl::ResourceExhaustedError(message);
    }
    return absl::InternalError(message);
  }
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } message;
  std::memset(&message, 0, sizeof(message));
  message.header.nlmsg_len = sizeof(message);
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  message.request.sdiag_family = static_cast<uint8_t>(family);
  message.request.sdiag_protocol = IPPROTO_TCP;
  // Every state but those of sockets no process holds (inode 0), which a connect/close loop
  // leaves by the thousand: TIME_WAIT, and NEW_SYN_RECV (12, the kernel's request sockets).
  message.request.idiag_states = ~((1u << TCP_TIME_WAIT) | (1u << 12));
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(sock.fd, &message, sizeof(message), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) <
      0) {
    return absl::InternalError(absl::StrCat("sock_diag request: ", std::strerror(errno)));
  }
  std::vector<char> buffer(64 << 10);
  while (true) {
    const ssize_t got = ::recv(sock.fd, buffer.data(), buffer.size(), 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("sock_diag reply: ", std::strerror(errno)));
    }
    int left = static_cast<int>(got);
    for (auto* header = reinterpret_cast<nlmsghdr*>(buffer.data()); NLMSG_OK(header, left);
         header = NLMSG_NEXT(header, left)) {
      if (header->nlmsg_type == NLMSG_DONE) return absl::OkStatus();
      if (header->nlmsg_type == NLMSG_ERROR) {
        const auto* error = static_cast<const nlmsgerr*>(NLMSG_DATA(header));
        return absl::InternalError(absl::StrCat("sock_diag: ", std::strerror(-error->error)));
      }
      if (header->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) continue;
      const auto* socket = static_cast<const inet_diag_msg*>(NLMSG_DATA(header));
      if (socket->idiag_inode != 0) inodes.insert(static_cast<ino_t>(socket->idiag_inode));
    }
    if (got == 0) return absl::InternalError("sock_diag: the reply ended without NLMSG_DONE");
  }
}

}  // namespace

absl::StatusOr<absl::flat_hash_set<ino_t>> OpenTcpSocketInodes() {
  absl::flat_hash_set<ino_t> inodes;
  for (int family : {AF_INET, AF_INET6}) {
    if (absl::Status dumped = DumpFamily(family, inodes); !dumped.ok()) return dumped;
  }
  return inodes;
}

}  // namespace metaload
