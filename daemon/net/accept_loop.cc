#include "daemon/net/accept_loop.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/net/peer_address.h"
#include "util/log.h"

namespace metaload {
namespace {

constexpr absl::Duration kLogInterval = absl::Seconds(10);
// A flood on one listener must not keep the loop from the others, nor from Stop().
constexpr int kMaxAcceptsPerWake = 256;
// How long the loop waits when it can do nothing for a pending connection (no descriptor to
// free, no kernel memory): the connection waits in the backlog meanwhile.
constexpr int kBackoffMs = 10;

int OpenReserve() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }

void CloseAtOnce(int fd) {
  ::shutdown(fd, SHUT_RDWR);  // a FIN first: a client that has sent nothing yet sees it closed
  ::close(fd);
}

uint64_t SoftFdLimit() {
  struct rlimit limit {};
  return ::getrlimit(RLIMIT_NOFILE, &limit) == 0 ? static_cast<uint64_t>(limit.rlim_cur) : 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<AcceptLoop>> AcceptLoop::Start(ListenSockets sockets, ConnectionCap* cap,
                                                              PreauthConnections* preauth, Handoff handoff) {
  const int wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) return absl::InternalError(absl::StrCat("accept loop: eventfd: ", std::strerror(errno)));
  return std::unique_ptr<AcceptLoop>(
      new AcceptLoop(std::move(sockets), cap, preauth, std::move(handoff), wake_fd));
}

AcceptLoop::AcceptLoop(ListenSockets sockets, ConnectionCap* cap, PreauthConnections* preauth,
                       Handoff handoff, int wake_fd)
    : sockets_(std::move(sockets)),
      port_(sockets_.port()),
      cap_(cap),
      preauth_(preauth),
      handoff_(std::move(handoff)),
      wake_fd_(wake_fd),
      reserve_fd_(OpenReserve()),
      out_of_descriptors_(kLogInterval),
      accept_errors_(kLogInterval) {
  thread_ = std::thread([this] { Run(); });
}

AcceptLoop::~AcceptLoop() {
  Stop();
  ::close(wake_fd_);
  if (reserve_fd_ >= 0) ::close(reserve_fd_);
}

void AcceptLoop::Stop() {
  if (!thread_.joinable()) return;
  stopping_.store(true);
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  thread_.join();
  sockets_.Close();
}

AcceptLoop::Counts AcceptLoop::counts() const {
  return Counts{handed_off_.load(), refused_.load(), shed_.load(), gone_.load()};
}

void AcceptLoop::Run() {
  std::vector<pollfd> polled;
  for (int fd : sockets_.fds()) polled.push_back(pollfd{fd, POLLIN, 0});
  polled.push_back(pollfd{wake_fd_, POLLIN, 0});
  while (!stopping_.load()) {
    if (::poll(polled.data(), polled.size(), -1) < 0) {
      if (errno != EINTR) {
        LogError(absl::StrCat("accept loop: poll: ", std::strerror(errno)));
        Pause(100);
      }
      continue;
    }
    if (polled.back().revents != 0) break;  // Stop()
    bool back_off = false;
    for (size_t i = 0; i + 1 < polled.size(); ++i) {
      if (polled[i].revents != 0 && !Drain(polled[i].fd)) back_off = true;
    }
    if (back_off) Pause(kBackoffMs);
  }
}

bool AcceptLoop::Drain(int listener) {
  for (int i = 0; i < kMaxAcceptsPerWake && !stopping_.load(); ++i) {
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      Admit(listener, fd);
      continue;
    }
    const int error = errno;
    switch (error) {
      case EAGAIN:
        return true;
      case EINTR:
        continue;
      case EMFILE:
      case ENFILE:
        if (!Shed(listener, error)) return false;
        continue;
      // That connection is gone already (or failed in the network stack): accept(2) says
      // to retry.
      case ECONNABORTED:
      case EPROTO:
      case ENETDOWN:
      case ENOPROTOOPT:
      case EHOSTDOWN:
      case ENONET:
      case EHOSTUNREACH:
      case EOPNOTSUPP:
      case ENETUNREACH:
      case EPERM:
        continue;
      default:  // ENOBUFS, ENOMEM: kernel memory; anything else: nothing to do but wait
        if (const uint64_t times = accept_errors_.Count(absl::Now()); times != 0) {
          LogError(absl::StrCat("cannot accept connections: ", std::strerror(error), " (", times,
                                " times since the last such line); retrying every ", kBackoffMs, " ms"));
        }
        return false;
    }
  }
  return true;
}

void AcceptLoop::Admit(int listener, int fd) {
  // A client that closed before it was accepted (a connect/close loop) has nothing for gRPC to
  // serve: closed here, it costs gRPC nothing and never counts against the caps.
  char byte;
  const ssize_t peeked = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (peeked == 0 || (peeked < 0 && errno != EAGAIN && errno != EINTR)) {
    ::close(fd);
    gone_.fetch_add(1);
    return;
  }
  int error = 0;
  const PreauthConnections::Admission admission = preauth_ != nullptr ? preauth_->Admit(fd, &error)
                                                  : cap_->Admit(fd) ? PreauthConnections::Admission::kAdmitted
                                                                    : PreauthConnections::Admission::kRefused;
  if (admission == PreauthConnections::Admission::kNoDescriptor) {  // none left to watch it with
    const std::string host = SocketPeerHost(fd);
    CloseAtOnce(fd);
    shed_.fetch_add(1);
    LogOutOfDescriptors(error,
                        absl::StrCat("closed a connection from ", host.empty() ? "an unknown peer" : host,
                                     " as soon as it was accepted"));
    return;
  }
  if (admission == PreauthConnections::Admission::kRefused) {
    CloseAtOnce(fd);
    refused_.fetch_add(1);
    return;
  }
  handed_off_.fetch_add(1);
  handoff_(listener, fd);
}

bool AcceptLoop::Shed(int listener, int error) {
  if (reserve_fd_ < 0) reserve_fd_ = OpenReserve();  // given back after an earlier shed failed
  if (reserve_fd_ < 0) {
    LogOutOfDescriptors(error, "a connection waits unaccepted (no descriptor is free to refuse it)");
    return false;
  }
  ::close(reserve_fd_);
  const int fd = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  const int accept_error = errno;
  std::string host;
  if (fd >= 0) {
    host = SocketPeerHost(fd);
    CloseAtOnce(fd);
    shed_.fetch_add(1);
  }
  // Another thread may have taken the descriptor meanwhile: then the next shed tries again.
  reserve_fd_ = OpenReserve();
  if (fd < 0) {
    if (accept_error == EAGAIN || accept_error == ECONNABORTED) return true;  // nothing pending now
    LogOutOfDescriptors(error, "a connection waits unaccepted (another thread took the descriptor freed)");
    return false;
  }
  LogOutOfDescriptors(error,
                      absl::StrCat("closed a connection from ", host.empty() ? "an unknown peer" : host,
                                   " as soon as it was accepted"));
  return true;
}

void AcceptLoop::LogOutOfDescriptors(int error, const std::string& what) {
  const uint64_t times = out_of_descriptors_.Count(absl::Now());
  if (times == 0) return;
  const std::string limit =
      error == ENFILE ? std::string("the system is out of file descriptors (ENFILE, sysctl fs.file-max)")
                      : absl::StrCat("out of file descriptors (EMFILE, ", SoftFdLimit(), " allowed)");
  const char* raise =
      error == ENFILE ? "raise fs.file-max" : "raise the hard limit (systemd LimitNOFILE, ulimit -Hn)";
  LogWarning(absl::StrCat(limit, ": ", what, "; ", times,
                          " since the last such line. To serve more at once, ", raise,
                          " or lower max_connections (", cap_->max_total(), ")"));
}

void AcceptLoop::Pause(int timeout_ms) {
  pollfd wake{wake_fd_, POLLIN, 0};
  ::poll(&wake, 1, timeout_ms);
}

}  // namespace metaload
