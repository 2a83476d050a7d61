// metad's accept loop (daemon/net/accept_loop.h) on real loopback sockets: what it hands over,
// what it refuses, what it sheds when the process is out of descriptors, and how it stops.
#include "daemon/net/accept_loop.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace metaload {
namespace {

// Keeps every connection handed to it open, as gRPC would, until the test ends.
class Kept {
 public:
  ~Kept() {
    for (int fd : fds_) ::close(fd);
  }
  AcceptLoop::Handoff Handoff() {
    return [this](int, int fd) {
      absl::MutexLock lock(&mu_);
      fds_.push_back(fd);
    };
  }

 private:
  absl::Mutex mu_;
  std::vector<int> fds_ ABSL_GUARDED_BY(mu_);
};

// The client side of a connection from `source` to 127.0.0.1:`port` (the kernel completes it
// whether or not anybody accepts).
int Connect(int port, const char* source = "127.0.0.1") {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &from.sin_addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)), 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// "closed" when the daemon side closed (end of file or reset) within `timeout_ms`, else "open".
std::string ClientSees(int fd, int timeout_ms = 300) {
  pollfd polled{fd, POLLIN, 0};
  if (::poll(&polled, 1, timeout_ms) != 1) return "open";
  char byte;
  const ssize_t got = ::recv(fd, &byte, 1, MSG_DONTWAIT);
  return got == 0 || (got < 0 && errno == ECONNRESET) ? "closed" : "open";
}

// Waits until the loop has dealt with `connections` in all.
AcceptLoop::Counts WaitForCounts(const AcceptLoop& loop, uint64_t connections) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  AcceptLoop::Counts counts = loop.counts();
  while (counts.handed_off + counts.refused + counts.shed + counts.gone < connections &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
    counts = loop.counts();
  }
  return counts;
}

std::unique_ptr<AcceptLoop> StartLoop(ConnectionCap* cap, Kept& kept, int* port) {
  absl::StatusOr<ListenSockets> sockets = ListenSockets::Open("127.0.0.1:0");
  EXPECT_TRUE(sockets.ok()) << sockets.status();
  *port = sockets->port();
  absl::StatusOr<std::unique_ptr<AcceptLoop>> loop =
      AcceptLoop::Start(*std::move(sockets), cap, /*preauth=*/nullptr, kept.Handoff());
  EXPECT_TRUE(loop.ok()) << loop.status();
  return *std::move(loop);
}

// Lowers the soft descriptor limit so that exactly `free_descriptors` more can be opened, for
// its lifetime.
class FewDescriptors {
 public:
  explicit FewDescriptors(int free_descriptors) {
    ::getrlimit(RLIMIT_NOFILE, &saved_);
    int number = 0;
    for (int free = 0; free < free_descriptors; ++number) {
      if (::fcntl(number, F_GETFD) < 0 && errno == EBADF) ++free;
    }
    rlimit lowered = saved_;
    lowered.rlim_cur = static_cast<rlim_t>(number);  // descriptors are numbered below the limit
    EXPECT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);
  }
  ~FewDescriptors() { ::setrlimit(RLIMIT_NOFILE, &saved_); }

 private:
  rlimit saved_{};
};

TEST(AcceptLoop, HandsAdmittedConnectionsOverAndClosesThosePastEitherLimit) {
  ConnectionCap cap(/*max_total=*/3, /*max_per_client=*/2);
  Kept kept;
  int port = 0;
  std::unique_ptr<AcceptLoop> loop = StartLoop(&cap, kept, &port);
  std::vector<int> clients;
  for (const char* source : {"127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.3"}) {
    clients.push_back(Connect(port, source));
    WaitForCounts(*loop, clients.size());  // in this order
  }
  const AcceptLoop::Counts counts = loop->counts();
  EXPECT_EQ(counts.handed_off, 3u);
  EXPECT_EQ(counts.refused, 2u);
  EXPECT_EQ(counts.shed, 0u);
  EXPECT_EQ(ClientSees(clients[2]), "closed") << "a third from one host";
  EXPECT_EQ(ClientSees(clients[4]), "closed") << "a fourth in all";
  for (int i : {0, 1, 3}) EXPECT_EQ(ClientSees(clients[i]), "open") << "connection " << i << " is held";
  for (int fd : clients) ::close(fd);
}

// A connect/close loop: what its clients closed before the loop accepted them costs gRPC
// nothing and never fills the caps.
TEST(AcceptLoop, AConnectionClosedBeforeItIsAcceptedIsNeitherHandedOverNorCounted) {
  ConnectionCap cap(4, 4);
  absl::StatusOr<ListenSockets> sockets = ListenSockets::Open("127.0.0.1:0");
  ASSERT_TRUE(sockets.ok()) << sockets.status();
  const int port = sockets->port();
  for (int i = 0; i < 20; ++i) ::close(Connect(port));  // waiting in the backlog, closed
  const int held = Connect(port);
  Kept kept;
  absl::StatusOr<std::unique_ptr<AcceptLoop>> loop =
      AcceptLoop::Start(*std::move(sockets), &cap, /*preauth=*/nullptr, kept.Handoff());
  ASSERT_TRUE(loop.ok()) << loop.status();
  const AcceptLoop::Counts counts = WaitForCounts(**loop, 21);
  EXPECT_EQ(counts.gone, 20u);
  EXPECT_EQ(counts.handed_off, 1u);
  EXPECT_EQ(counts.refused, 0u) << "20 closed connections are past max_connections, had they counted";
  EXPECT_EQ(cap.open(), 1u);
  EXPECT_EQ(ClientSees(held), "open");
  ::close(held);
}

// The reserve descriptor: out of descriptors, each pending connection is accepted and closed at
// once (its client sees it closed instead of hanging), the loop says which limit to raise, and
// it serves again as soon as descriptors are free.
TEST(AcceptLoop, OutOfDescriptorsItClosesPendingConnectionsAndRecovers) {
  ConnectionCap cap(64, 64);
  absl::StatusOr<ListenSockets> sockets = ListenSockets::Open("127.0.0.1:0");
  ASSERT_TRUE(sockets.ok()) << sockets.status();
  const int port = sockets->port();
  std::vector<int> clients;
  for (int i = 0; i < 10; ++i) clients.push_back(Connect(port));  // waiting in the backlog
  Kept kept;
  ::testing::internal::CaptureStderr();  // before: it opens descriptors of its own
  std::unique_ptr<AcceptLoop> loop;
  {
    FewDescriptors few(2 + 3);  // the loop's eventfd and reserve, and 3 connections
    absl::StatusOr<std::unique_ptr<AcceptLoop>> started =
        AcceptLoop::Start(*std::move(sockets), &cap, /*preauth=*/nullptr, kept.Handoff());
    ASSERT_TRUE(started.ok()) << started.status();
    loop = *std::move(started);
    const AcceptLoop::Counts counts = WaitForCounts(*loop, clients.size());
    EXPECT_EQ(counts.handed_off, 3u);
    EXPECT_EQ(counts.shed, 7u);
    EXPECT_EQ(counts.refused, 0u);
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ClientSees(clients[i]), "open") << "connection " << i;
  for (int i = 3; i < 10; ++i) EXPECT_EQ(ClientSees(clients[i]), "closed") << "connection " << i;
  EXPECT_NE(log.find("closed a connection from 127.0.0.1 as soon as it was accepted; 1 since the last such "
                     "line. To serve more at once, raise the hard limit (systemd LimitNOFILE, ulimit -Hn) "
                     "or lower max_connections (64)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("out of file descriptors (EMFILE, "), std::string::npos) << log;
  EXPECT_EQ(log.find("since the last such line", log.find("since the last such line") + 1), std::string::npos)
      << "at most one line every 10 s: " << log;

  clients.push_back(Connect(port));
  EXPECT_EQ(WaitForCounts(*loop, clients.size()).handed_off, 4u) << "descriptors are free again";
  EXPECT_EQ(ClientSees(clients.back()), "open");
  for (int fd : clients) ::close(fd);
}

TEST(AcceptLoop, StopEndsTheLoopAndClosesTheListener) {
  ConnectionCap cap(8, 8);
  Kept kept;
  int port = 0;
  std::unique_ptr<AcceptLoop> loop = StartLoop(&cap, kept, &port);
  const int before = Connect(port);
  ASSERT_EQ(WaitForCounts(*loop, 1).handed_off, 1u);
  loop->Stop();
  loop->Stop();  // idempotent
  EXPECT_EQ(Connect(port), -1) << "nothing listens on the port any more";
  EXPECT_EQ(loop->counts().handed_off, 1u);
  ::close(before);
}

}  // namespace
}  // namespace metaload
