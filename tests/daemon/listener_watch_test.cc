// Telling a listener that stopped accepting from a busy one (daemon/listener_watch.h).
#include "daemon/listener_watch.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

namespace metaload {
namespace {

TEST(ListenerWatch, StalledOnlyAfterABacklogThatStays) {
  ListenerWatch watch(3);
  EXPECT_FALSE(watch.Stalled(0));
  EXPECT_FALSE(watch.Stalled(2));
  EXPECT_FALSE(watch.Stalled(0));  // drained: a busy, working listener
  EXPECT_FALSE(watch.Stalled(1));
  EXPECT_FALSE(watch.Stalled(kUnknown));  // /proc unreadable (out of descriptors): no verdict
  EXPECT_FALSE(watch.Stalled(1));
  EXPECT_TRUE(watch.Stalled(1));
  EXPECT_FALSE(watch.Stalled(1)) << "the count starts again after a rebuild";
  EXPECT_TRUE(watch.Stalled(kNotListening));
}

// A socket that listens but never accepts: connections wait in its backlog, as behind gRPC
// 1.51's listener after EMFILE.
TEST(ListenBacklog, CountsConnectionsNobodyAccepted) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 16), 0);
  socklen_t length = sizeof(addr);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &length), 0);
  const int port = ntohs(addr.sin_port);
  EXPECT_EQ(ListenBacklog(port), 0);
  std::vector<int> clients;
  for (int i = 0; i < 3; ++i) {
    int c = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    clients.push_back(c);
  }
  EXPECT_EQ(ListenBacklog(port), 3);
  for (int c : clients) ::close(c);
  ::close(listener);
  EXPECT_EQ(ListenBacklog(port), kNotListening);
}

TEST(FdLimit, SoftLimitIsRaisedToTheHardOne) {
  const FdLimit limit = RaiseFdLimit();
  EXPECT_GT(limit.soft, 0u);
  EXPECT_EQ(limit.soft, limit.hard);
  EXPECT_GT(OpenFdCount(), 2);
}

}  // namespace
}  // namespace metaload
