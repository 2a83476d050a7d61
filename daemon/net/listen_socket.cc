#include "daemon/net/listen_socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace metaload {
namespace {

// The kernel caps it at net.core.somaxconn, the backlog gRPC's listener asked for.
constexpr int kListenBacklog = 65535;

struct Address {
  sockaddr_storage storage{};
  socklen_t length = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  int family() const { return storage.ss_family; }
};

// "127.0.0.1:7070", "[::1]:7070".
std::string Describe(const Address& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.family() == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address.storage);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
    return absl::StrCat(text, ":", ntohs(v4->sin_port));
  }
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address.storage);
  ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
  return absl::StrCat("[", text, "]:", ntohs(v6->sin6_port));
}

int PortOf(const Address& address) {
  return ntohs(address.family() == AF_INET
                   ? reinterpret_cast<const sockaddr_in*>(&address.storage)->sin_port
                   : reinterpret_cast<const sockaddr_in6*>(&address.storage)->sin6_port);
}

void SetPort(Address& address, int port) {
  const uint16_t network = htons(static_cast<uint16_t>(port));
  if (address.family() == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&address.storage)->sin_port = network;
  } else {
    reinterpret_cast<sockaddr_in6*>(&address.storage)->sin6_port = network;
  }
}

bool IsWildcard(const Address& address) {
  if (address.family() == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&address.storage)->sin_addr.s_addr == htonl(INADDR_ANY);
  }
  return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(&address.storage)->sin6_addr);
}

Address AnyAddress(int family, int port) {
  Address address;
  address.storage.ss_family = static_cast<sa_family_t>(family);
  address.length = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  SetPort(address, port);  // the rest is zero: INADDR_ANY, in6addr_any
  return address;
}

// A listening socket bound to `address`; the error names the step and the address. On return
// `address` holds the port bound.
absl::StatusOr<int> BindAndListen(Address& address) {
  const std::string where = Describe(address);
  const int fd = ::socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket for ", where, ": ", std::strerror(errno)));
  auto fail = [&](const char* step) {
    const int error = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat(step, " ", where, ": ", std::strerror(error)));
  };
  const int on = 1, off = 0;
  // TCP_NODELAY is inherited by the sockets accepted from it, as from gRPC's listener; an IPv6
  // socket also takes IPv4 clients (only a wildcard can have any).
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on)) != 0 ||
      (address.family() == AF_INET6 && ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)) != 0)) {
    return fail("setsockopt");
  }
  if (::bind(fd, address.get(), address.length) != 0) return fail("bind");
  if (::listen(fd, kListenBacklog) != 0) return fail("listen");
  Address bound;
  bound.length = sizeof(bound.storage);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound.storage), &bound.length) != 0) {
    return fail("getsockname");
  }
  SetPort(address, PortOf(bound));
  return fd;
}

// The addresses `host` names, with `port`.
absl::StatusOr<std::vector<Address>> Resolve(const std::string& host, const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int error = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); error != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": ", ::gai_strerror(error)));
  }
  std::vector<Address> addresses;
  for (const addrinfo* at = found; at != nullptr; at = at->ai_next) {
    if ((at->ai_family != AF_INET && at->ai_family != AF_INET6) ||
        at->ai_addrlen > sizeof(sockaddr_storage)) {
      continue;
    }
    Address address;
    std::memcpy(&address.storage, at->ai_addr, at->ai_addrlen);
    address.length = at->ai_addrlen;
    addresses.push_back(address);
  }
  ::freeaddrinfo(found);
  if (addresses.empty()) return absl::UnavailableError(absl::StrCat("no IPv4 or IPv6 address for ", host));
  return addresses;
}

}  // namespace

absl::StatusOr<ListenSockets> ListenSockets::Open(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("\"", address, "\" is not host:port"));
  }
  std::string host(address.substr(0, colon));
  const std::string port(address.substr(colon + 1));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  absl::StatusOr<std::vector<Address>> resolved = Resolve(host, port);
  if (!resolved.ok()) return resolved.status();

  // A wildcard is every address of the host: one dual-stack socket where IPv6 works.
  if (IsWildcard(resolved->front())) {
    const int wanted = PortOf(resolved->front());
    *resolved = {AnyAddress(AF_INET6, wanted), AnyAddress(AF_INET, wanted)};
  }
  ListenSockets sockets;
  std::vector<std::string> errors;
  for (Address& each : *resolved) {
    if (sockets.port_ != 0) SetPort(each, sockets.port_);  // host:0 picks one port for all
    absl::StatusOr<int> fd = BindAndListen(each);
    if (!fd.ok()) {
      errors.emplace_back(fd.status().message());
      continue;
    }
    sockets.fds_.push_back(*fd);
    sockets.port_ = PortOf(each);
    if (IsWildcard(each)) break;  // the dual-stack socket already takes IPv4
  }
  if (sockets.fds_.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, ": ", absl::StrJoin(errors, "; ")));
  }
  return sockets;
}

ListenSockets::ListenSockets(ListenSockets&& other) noexcept
    : fds_(std::exchange(other.fds_, {})), port_(other.port_) {}

ListenSockets& ListenSockets::operator=(ListenSockets&& other) noexcept {
  if (this != &other) {
    Close();
    fds_ = std::exchange(other.fds_, {});
    port_ = other.port_;
  }
  return *this;
}

ListenSockets::~ListenSockets() { Close(); }

void ListenSockets::Close() {
  for (int fd : fds_) ::close(fd);
  fds_.clear();
}

}  // namespace metaload
