#include "daemon/net/peer_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace metaload {
namespace {

// The peer's host (as SocketPeerHost) and port (0 for a Unix socket or none).
std::string PeerOf(int fd, uint16_t& port) {
  port = 0;
  sockaddr_storage address;
  socklen_t length = sizeof(address);
  std::memset(&address, 0, sizeof(address));
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "";
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    if (::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text)) == nullptr) return "";
    port = ntohs(v4->sin_port);
    return text;
  }
  if (address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    port = ntohs(v6->sin6_port);
    if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {  // a dual-stack listener's IPv4 client, as gRPC names it
      if (::inet_ntop(AF_INET, &v6->sin6_addr.s6_addr[12], text, sizeof(text)) == nullptr) return "";
      return text;
    }
    if (::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text)) == nullptr) return "";
    return absl::StrCat("[", text, "]");
  }
  if (address.ss_family == AF_UNIX) return "unix";
  return "";
}

}  // namespace

std::string SocketPeerHost(int fd) {
  uint16_t port;
  return PeerOf(fd, port);
}

std::string SocketPeerAddress(int fd) {
  uint16_t port;
  std::string host = PeerOf(fd, port);
  if (host.empty() || port == 0) return "";
  return absl::StrCat(host, ":", port);
}

std::string GrpcPeerAddress(absl::string_view peer) {
  const bool v4 = absl::ConsumePrefix(&peer, "ipv4:");
  if (!v4 && !absl::ConsumePrefix(&peer, "ipv6:")) return "";
  // gRPC writes the peer as a URI: an IPv6 host's brackets and zone sign percent-encoded.
  const std::string text = absl::StrReplaceAll(peer, {{"%5B", "["}, {"%5D", "]"}, {"%25", "%"}});
  const size_t colon = text.rfind(':');
  uint32_t port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(absl::string_view(text).substr(colon + 1), &port) ||
      port == 0 || port > 65535) {
    return "";
  }
  std::string host = text.substr(0, colon);
  // Written again as SocketPeerHost writes it, so that the two compare equal byte for byte.
  char canonical[INET6_ADDRSTRLEN] = {};
  if (v4) {
    in_addr address;
    if (::inet_pton(AF_INET, host.c_str(), &address) != 1) return "";
    ::inet_ntop(AF_INET, &address, canonical, sizeof(canonical));
    return absl::StrCat(canonical, ":", port);
  }
  if (host.size() < 2 || host.front() != '[' || host.back() != ']') return "";
  host = host.substr(1, host.size() - 2);
  host = host.substr(0, host.find('%'));  // the zone (fe80::1%eth0): getpeername's text has none
  in6_addr address;
  if (::inet_pton(AF_INET6, host.c_str(), &address) != 1) return "";
  if (IN6_IS_ADDR_V4MAPPED(&address)) {
    ::inet_ntop(AF_INET, &address.s6_addr[12], canonical, sizeof(canonical));
    return absl::StrCat(canonical, ":", port);
  }
  ::inet_ntop(AF_INET6, &address, canonical, sizeof(canonical));
  return absl::StrCat("[", canonical, "]:", port);
}

}  // namespace metaload
