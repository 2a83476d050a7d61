#include "daemon/config/self_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"

namespace metaload {
namespace {

// "ip" strings of every address of this machine's interfaces.
std::set<std::string> LocalAddresses() {
  std::set<std::string> out;
  struct ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (struct ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {0};
    if (a->ifa_addr->sa_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof(text));
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, text, sizeof(text));
    } else {
      continue;
    }
    out.insert(text);
  }
  ::freeifaddrs(list);
  return out;
}

bool ResolvesToThisMachine(const std::string& host) {
  struct addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  const std::set<std::string> local = LocalAddresses();
  bool self = false;
  for (struct addrinfo* a = found; a != nullptr && !self; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {0};
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<sockaddr_in*>(a->ai_addr);
      ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
      self = (ntohl(in->sin_addr.s_addr) >> 24) == 127 || local.count(text) > 0;
    } else if (a->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<sockaddr_in6*>(a->ai_addr);
      ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
      self = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) || local.count(text) > 0;
    }
  }
  ::freeaddrinfo(found);
  return self;
}

}  // namespace

bool CoordinatorIsSelf(const NodeConfig& config, const std::string& advertised, int bound_port,
                       const std::string& hostname) {
  const std::string& coordinator = config.coordinator;
  if (coordinator.empty() || coordinator == config.listen || coordinator == advertised) return true;
  const size_t colon = coordinator.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(coordinator.substr(colon + 1), &port) ||
      port != bound_port) {
    return false;
  }
  std::string host = coordinator.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string lower = absl::AsciiStrToLower(host);
  if (lower == "localhost" || lower == absl::AsciiStrToLower(hostname)) return true;
  return ResolvesToThisMachine(host);
}

}  // namespace metaload
