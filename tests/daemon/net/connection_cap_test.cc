// Counting accepted connections against max_connections(_per_client) (daemon/net/
// connection_cap.h), with real TCP connections on loopback from distinct source addresses.
#include "daemon/net/connection_cap.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "daemon/net/peer_address.h"
#include "daemon/net/tcp_sockets.h"
#include "tests/daemon/net/loopback_listener.h"

namespace metaload {
namespace {

TEST(ConnectionCap, NamesThePeerHost) {
  Listener listener;
  EXPECT_EQ(SocketPeerHost(listener.Accept("127.0.0.5")), "127.0.0.5");
  EXPECT_EQ(SocketPeerHost(-1), "");
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  EXPECT_EQ(SocketPeerHost(pipe_fds[0]), "") << "not a socket";
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

TEST(ConnectionCap, RefusesPastEachLimit) {
  Listener listener;
  ConnectionCap cap(/*max_total=*/4, /*max_per_client=*/2);
  EXPECT_TRUE(cap.Admit(listener.Accept("127.0.0.1")));
  EXPECT_TRUE(cap.Admit(listener.Accept("127.0.0.1")));
  EXPECT_FALSE(cap.Admit(listener.Accept("127.0.0.1"))) << "a third from one host";
  EXPECT_TRUE(cap.Admit(listener.Accept("127.0.0.2")));
  EXPECT_TRUE(cap.Admit(listener.Accept("127.0.0.3")));
  EXPECT_FALSE(cap.Admit(listener.Accept("127.0.0.4"))) << "a fifth in all";
  EXPECT_EQ(cap.open(), 4u);
}

TEST(ConnectionCap, ACloseFreesItsPlaceForTheSameHostAndInAll) {
  Listener listener;
  ConnectionCap cap(2, 1);
  const int first = listener.Accept("127.0.0.1");
  ASSERT_TRUE(cap.Admit(first));
  ASSERT_TRUE(cap.Admit(listener.Accept("127.0.0.2")));
  EXPECT_FALSE(cap.Admit(listener.Accept("127.0.0.1")));
  listener.Close(first);
  absl::SleepFor(absl::Milliseconds(150));  // the refusal above just pruned: past its 100 ms
  EXPECT_TRUE(cap.Admit(listener.Accept("127.0.0.1"))) << "the closed one no longer counts";
  EXPECT_EQ(cap.open(), 2u);
}

// A connect/close loop: once enough connections were admitted since the kernel's list was last
// read, a refusal reads it again at once, 100 ms or not.
TEST(ConnectionCap, AdmissionsSinceTheLastLookLetItLookAgainAtOnce) {
  Listener listener;
  ConnectionCap cap(/*max_total=*/8, /*max_per_client=*/4);  // a look again after each admission
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) {
    fds.push_back(listener.Accept("127.0.0.1"));
    ASSERT_TRUE(cap.Admit(fds.back()));
  }
  EXPECT_FALSE(cap.Admit(listener.Accept("127.0.0.1"))) << "looked: all 4 are open";
  listener.Close(fds[0]);
  ASSERT_TRUE(cap.Admit(listener.Accept("127.0.0.2")));
  EXPECT_TRUE(cap.Admit(listener.Accept("127.0.0.1"))) << "looked again at once: the closed one is gone";
  EXPECT_EQ(cap.open(), 5u);
}

TEST(ConnectionCap, PruneDropsClosedSocketsAndKeepsOpenOnes) {
  Listener listener;
  ConnectionCap cap(8, 8);
  std::vector<int> fds;
  for (int i = 0; i < 5; ++i) {
    fds.push_back(listener.Accept());
    ASSERT_TRUE(cap.Admit(fds.back()));
  }
  listener.Close(fds[1]);
  listener.Close(fds[3]);
  cap.Prune();
  EXPECT_EQ(cap.open(), 3u);
}

// The descriptor number of a connection `cap` admitted and that has closed since.
int AdmittedThenClosed(Listener& listener, ConnectionCap& cap) {
  const int fd = listener.Accept();
  EXPECT_TRUE(cap.Admit(fd));
  listener.Close(fd);
  return fd;
}

// gRPC closed a connection and its descriptor number went to a new one: the count follows the
// sockets, not the numbers.
TEST(ConnectionCap, ADescriptorNumberReusedIsANewConnection) {
  Listener listener;
  ConnectionCap cap(2, 2);
  const int first = AdmittedThenClosed(listener, cap);
  ASSERT_EQ(::dup2(listener.Accept(), first), first);  // the number now names another connection
  ASSERT_TRUE(cap.Admit(first));
  cap.Prune();
  EXPECT_EQ(cap.open(), 1u) << "the closed one is gone, the new one counts";
  ::close(first);
}

// A descriptor that names a file, not a socket, is not a connection.
TEST(ConnectionCap, ADescriptorOfAFileIsNoConnection) {
  Listener listener;
  ConnectionCap cap(1, 1);
  AdmittedThenClosed(listener, cap);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  cap.Prune();
  EXPECT_EQ(cap.open(), 0u);
  EXPECT_FALSE(cap.Admit(pipe_fds[0])) << "not a socket";
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

// The kernel's list of open TCP sockets: a socket is in it while a descriptor holds it.
TEST(ConnectionCap, TheKernelListsOpenSocketsByInode) {
  Listener listener;
  const int server = listener.Accept();
  struct stat st;
  ASSERT_EQ(::fstat(server, &st), 0);
  auto open = OpenTcpSocketInodes();
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_TRUE(open->contains(st.st_ino));
  listener.Close(server);
  open = OpenTcpSocketInodes();
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_FALSE(open->contains(st.st_ino));
}

}  // namespace
}  // namespace metaload
