// Connections not yet authenticated (daemon/net/preauth_connections.h) and the peer addresses
// that match gRPC's names for them (peer_address.h), with real TCP connections on loopback.
#include "daemon/net/preauth_connections.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/net/peer_address.h"
#include "tests/daemon/net/loopback_listener.h"

namespace metaload {
namespace {

// Whether the peer closed `client`'s connection within `timeout`.
bool ClosedWithin(int client, absl::Duration timeout) {
  pollfd polled{client, POLLIN | POLLRDHUP, 0};
  if (::poll(&polled, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1) return false;
  char byte;
  return ::recv(client, &byte, 1, MSG_DONTWAIT) == 0;
}

// gRPC's name for the connection whose server side is `fd`.
std::string GrpcPeer(int fd) { return absl::StrCat("ipv4:", SocketPeerAddress(fd)); }

bool Admitted(PreauthConnections& preauth, int fd) {
  int error = 0;
  return preauth.Admit(fd, &error) == PreauthConnections::Admission::kAdmitted;
}

std::unique_ptr<PreauthConnections> Start(PreauthLimits limits, ConnectionCap* cap) {
  absl::StatusOr<std::unique_ptr<PreauthConnections>> started = PreauthConnections::Start(limits, cap);
  EXPECT_TRUE(started.ok()) << started.status();
  return *std::move(started);
}

// A listener, a connection cap of `max_connections` (from one host alike), and the pre-auth
// connections over it.
struct Rig {
  Rig(uint32_t max_connections, PreauthLimits limits)
      : cap(max_connections, max_connections), preauth(Start(limits, &cap)) {}
  Listener listener;
  ConnectionCap cap;
  std::unique_ptr<PreauthConnections> preauth;
};

TEST(PeerAddress, MatchesGrpcsNamesForTheSameConnection) {
  Listener listener;
  const int fd = listener.Accept("127.0.0.7");
  const std::string address = SocketPeerAddress(fd);
  ASSERT_TRUE(address.starts_with("127.0.0.7:")) << address;
  EXPECT_EQ(GrpcPeerAddress(absl::StrCat("ipv4:", address)), address);
  EXPECT_EQ(GrpcPeerAddress("ipv6:%5B::1%5D:5555"), "[::1]:5555");
  EXPECT_EQ(GrpcPeerAddress("ipv6:%5B0:0::1%5D:5555"), "[::1]:5555") << "written as inet_ntop writes it";
  EXPECT_EQ(GrpcPeerAddress("ipv6:%5Bfe80::1%25eth0%5D:5555"), "[fe80::1]:5555") << "no zone";
  EXPECT_EQ(GrpcPeerAddress("ipv6:%5B::ffff:10.0.0.7%5D:80"), "10.0.0.7:80") << "IPv4-mapped";
  for (const char* not_tcp : {"unix:/run/metad.sock", "ipv4:127.0.0.1", "ipv4:127.0.0.1:0", "ipv4:1.2.3:80",
                              "ipv4:127.0.0.1:65536", "ipv6:::1:80", ""}) {
    EXPECT_EQ(GrpcPeerAddress(not_tcp), "") << not_tcp;
  }
  EXPECT_EQ(SocketPeerAddress(-1), "");
}

TEST(PreauthConnections, ClosesAConnectionThatDoesNotAuthenticateInTime) {
  Rig rig(8, {8, 8, absl::Milliseconds(300)});
  auto& [listener, cap, preauth] = rig;
  const auto [client, server] = listener.Connect();
  const absl::Time start = absl::Now();
  ASSERT_TRUE(Admitted(*preauth, server));
  EXPECT_EQ(preauth->open(), 1u);
  EXPECT_EQ(cap.open(), 0u) << "not an authenticated slot";
  EXPECT_TRUE(ClosedWithin(client, absl::Seconds(5)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_EQ(preauth->open(), 0u);
  EXPECT_EQ(preauth->counts().timed_out, 1u);
}

TEST(PreauthConnections, AnAuthenticatedConnectionMovesToTheConnectionCapAndStaysOpen) {
  Rig rig(8, {8, 8, absl::Milliseconds(300)});
  auto& [listener, cap, preauth] = rig;
  const auto [client, server] = listener.Connect();
  ASSERT_TRUE(Admitted(*preauth, server));
  preauth->Authenticated(GrpcPeer(server));
  EXPECT_EQ(preauth->open(), 0u);
  EXPECT_EQ(cap.open(), 1u);
  EXPECT_EQ(preauth->counts().authenticated, 1u);
  EXPECT_FALSE(ClosedWithin(client, absl::Seconds(1)));
  preauth->Authenticated(GrpcPeer(server));  // its later calls: nothing to do
  EXPECT_EQ(cap.open(), 1u);
}

TEST(PreauthConnections, RefusesPastAHostsShareAndClosesTheOldestPastTheTotal) {
  Rig rig(1, {3, 2, absl::Seconds(30)});
  auto& [listener, cap, preauth] = rig;
  const auto [oldest_client, oldest] = listener.Connect("127.0.0.2");
  EXPECT_TRUE(Admitted(*preauth, oldest));
  EXPECT_TRUE(Admitted(*preauth, listener.Accept("127.0.0.2")));
  EXPECT_FALSE(Admitted(*preauth, listener.Accept("127.0.0.2"))) << "max_preauth_connections_per_client";
  EXPECT_EQ(preauth->counts().refused, 1u);
  const int third = listener.Accept("127.0.0.3");
  EXPECT_TRUE(Admitted(*preauth, third));
  // max_preauth_connections held: a new one is admitted, and the oldest closed for it.
  EXPECT_TRUE(Admitted(*preauth, listener.Accept("127.0.0.4")));
  EXPECT_EQ(preauth->counts().evicted, 1u);
  EXPECT_EQ(preauth->open(), 3u);
  EXPECT_TRUE(ClosedWithin(oldest_client, absl::Seconds(5)));
  // One authenticates and takes the only authenticated slot: a new one could never be admitted.
  preauth->Authenticated(GrpcPeer(third));
  EXPECT_EQ(cap.open(), 1u);
  EXPECT_FALSE(Admitted(*preauth, listener.Accept("127.0.0.5"))) << "max_connections";
}

TEST(PreauthConnections, ClosesAnAuthenticatedConnectionTheConnectionCapRefuses) {
  Rig rig(1, {8, 8, absl::Seconds(30)});
  auto& [listener, cap, preauth] = rig;
  const auto [first_client, first] = listener.Connect("127.0.0.2");
  const auto [second_client, second] = listener.Connect("127.0.0.2");
  ASSERT_TRUE(Admitted(*preauth, first));
  ASSERT_TRUE(Admitted(*preauth, second));
  preauth->Authenticated(GrpcPeer(first));
  preauth->Authenticated(GrpcPeer(second));
  EXPECT_EQ(preauth->counts().over_cap, 1u);
  EXPECT_TRUE(ClosedWithin(second_client, absl::Seconds(5)));
  EXPECT_FALSE(ClosedWithin(first_client, absl::Milliseconds(200)));
}

TEST(PreauthConnections, ForgetsAConnectionItsClientClosed) {
  Rig rig(8, {8, 1, absl::Seconds(30)});
  auto& [listener, cap, preauth] = rig;
  const auto [client, server] = listener.Connect("127.0.0.2");
  ASSERT_TRUE(Admitted(*preauth, server));
  listener.Close(client);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (preauth->open() != 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(preauth->open(), 0u);
  EXPECT_EQ(preauth->counts().hung_up, 1u);
  EXPECT_TRUE(Admitted(*preauth, listener.Accept("127.0.0.2"))) << "its host's share is free again";
}

TEST(PreauthConnections, ClosesAnAuthenticatedConnectionThatResetsCallsFasterThanItCompletesThem) {
  Rig rig(8, {8, 8, absl::Seconds(30)});
  auto& [listener, cap, preauth] = rig;
  const auto [steady_client, steady] = listener.Connect("127.0.0.2");
  const auto [flood_client, flood] = listener.Connect("127.0.0.3");
  ASSERT_TRUE(Admitted(*preauth, steady));
  ASSERT_TRUE(Admitted(*preauth, flood));
  preauth->Authenticated(GrpcPeer(steady));
  preauth->Authenticated(GrpcPeer(flood));
  // A client that completes more than it cancels is never cut, however many it cancels.
  for (int i = 0; i < 1000; ++i) preauth->CallEnded(GrpcPeer(steady), /*reset=*/false);
  for (int i = 0; i < 999; ++i) preauth->CallEnded(GrpcPeer(steady), /*reset=*/true);
  for (int i = 0; i < 499; ++i) preauth->CallEnded(GrpcPeer(flood), /*reset=*/true);
  EXPECT_EQ(preauth->counts().reset_floods, 0u);
  EXPECT_FALSE(ClosedWithin(flood_client, absl::Milliseconds(100))) << "499 resets";
  preauth->CallEnded(GrpcPeer(flood), /*reset=*/true);
  EXPECT_EQ(preauth->counts().reset_floods, 1u);
  EXPECT_TRUE(ClosedWithin(flood_client, absl::Seconds(5)));
  EXPECT_FALSE(ClosedWithin(steady_client, absl::Milliseconds(100)));
}

}  // namespace
}  // namespace metaload
