// Binding metad's listening sockets (daemon/net/listen_socket.h) as gRPC's listener bound
// them: host:0, a port in use, IPv6, wildcards.
#include "daemon/net/listen_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace metaload {
namespace {

// Whether a TCP connection to `ip` (a literal of `family`) and `port` is accepted by the kernel.
bool Connects(int family, const char* ip, int port) {
  sockaddr_storage storage{};
  socklen_t length = 0;
  if (family == AF_INET) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, ip, &v4->sin_addr);
    length = sizeof(*v4);
  } else {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET6, ip, &v6->sin6_addr);
    length = sizeof(*v6);
  }
  const int fd = ::socket(family, SOCK_STREAM, 0);
  const bool connected = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&storage), length) == 0;
  if (fd >= 0) ::close(fd);
  return connected;
}

bool HasIpv6Loopback() {
  absl::StatusOr<ListenSockets> probe = ListenSockets::Open("[::1]:0");
  return probe.ok();
}

TEST(ListenSockets, PortZeroLetsTheKernelPickAFreePort) {
  absl::StatusOr<ListenSockets> sockets = ListenSockets::Open("127.0.0.1:0");
  ASSERT_TRUE(sockets.ok()) << sockets.status();
  ASSERT_EQ(sockets->fds().size(), 1u);
  EXPECT_GT(sockets->port(), 0);
  EXPECT_TRUE(Connects(AF_INET, "127.0.0.1", sockets->port()));
  const int flags = ::fcntl(sockets->fds()[0], F_GETFL);
  EXPECT_TRUE(flags & O_NONBLOCK) << "the accept loop polls it";
  EXPECT_TRUE(::fcntl(sockets->fds()[0], F_GETFD) & FD_CLOEXEC) << "a child process must not inherit it";
}

// SO_REUSEPORT off: a second daemon on a port in use must fail, not answer half the calls.
TEST(ListenSockets, APortInUseIsRefusedAndSaysSo) {
  absl::StatusOr<ListenSockets> first = ListenSockets::Open("127.0.0.1:0");
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string address = absl::StrCat("127.0.0.1:", first->port());
  absl::StatusOr<ListenSockets> second = ListenSockets::Open(address);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().message(),
            absl::StrCat("cannot listen on ", address, ": bind ", address, ": Address already in use"));
}

// SO_REUSEADDR on: a daemon restarted on its port binds again while the connections of the one
// before linger in TIME_WAIT.
TEST(ListenSockets, APortWithConnectionsInTimeWaitBindsAgain) {
  int port = 0;
  {
    absl::StatusOr<ListenSockets> first = ListenSockets::Open("127.0.0.1:0");
    ASSERT_TRUE(first.ok()) << first.status();
    port = first->port();
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int client = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
    const int server = ::accept(first->fds()[0], nullptr, nullptr);
    ASSERT_GE(server, 0);
    ::close(server);  // the server side closes first: its end goes to TIME_WAIT
    ::close(client);
  }
  absl::StatusOr<ListenSockets> again = ListenSockets::Open(absl::StrCat("127.0.0.1:", port));
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST(ListenSockets, AnAddressOfNoInterfaceOrAHostThatDoesNotResolveIsRefused) {
  absl::StatusOr<ListenSockets> foreign = ListenSockets::Open("192.0.2.1:0");  // TEST-NET-1
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.status().message(),
            "cannot listen on 192.0.2.1:0: bind 192.0.2.1:0: Cannot assign requested address");
  absl::StatusOr<ListenSockets> unknown = ListenSockets::Open("no-such-host.invalid:0");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message().substr(0, 42), "cannot resolve no-such-host.invalid: Name ");
}

TEST(ListenSockets, AnIpv6LiteralInBrackets) {
  if (!HasIpv6Loopback()) GTEST_SKIP() << "no IPv6 loopback here";
  absl::StatusOr<ListenSockets> sockets = ListenSockets::Open("[::1]:0");
  ASSERT_TRUE(sockets.ok()) << sockets.status();
  EXPECT_TRUE(Connects(AF_INET6, "::1", sockets->port()));
}

// As gRPC bound it: one dual-stack socket takes IPv4 and IPv6 clients, for either wildcard.
TEST(ListenSockets, AWildcardTakesIpv4AndIpv6Clients) {
  for (const char* wildcard : {"0.0.0.0:0", "[::]:0"}) {
    absl::StatusOr<ListenSockets> sockets = ListenSockets::Open(wildcard);
    ASSERT_TRUE(sockets.ok()) << wildcard << ": " << sockets.status();
    EXPECT_EQ(sockets->fds().size(), 1u) << wildcard;
    EXPECT_TRUE(Connects(AF_INET, "127.0.0.1", sockets->port())) << wildcard;
    if (HasIpv6Loopback()) {
      EXPECT_TRUE(Connects(AF_INET6, "::1", sockets->port())) << wildcard;
    }
  }
}

// `localhost` names 127.0.0.1 and, where there is IPv6, ::1: each is bound, on one port.
TEST(ListenSockets, EveryAddressOfANameIsBoundOnOnePort) {
  absl::StatusOr<ListenSockets> sockets = ListenSockets::Open("localhost:0");
  ASSERT_TRUE(sockets.ok()) << sockets.status();
  EXPECT_TRUE(Connects(AF_INET, "127.0.0.1", sockets->port()));
  if (HasIpv6Loopback() && sockets->fds().size() == 2) {
    EXPECT_TRUE(Connects(AF_INET6, "::1", sockets->port()));
  }
}

TEST(ListenSockets, CloseStopsListening) {
  absl::StatusOr<ListenSockets> sockets = ListenSockets::Open("127.0.0.1:0");
  ASSERT_TRUE(sockets.ok()) << sockets.status();
  const int port = sockets->port();
  ListenSockets moved = *std::move(sockets);
  EXPECT_TRUE(sockets->fds().empty()) << "moved from";
  moved.Close();
  EXPECT_TRUE(moved.fds().empty());
  EXPECT_FALSE(Connects(AF_INET, "127.0.0.1", port));
}

}  // namespace
}  // namespace metaload
