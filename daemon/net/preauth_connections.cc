#include "daemon/net/preauth_connections.h"

#include <fcntl.h>
#include <linux/tcp.h>  // tcp_info with tcpi_bytes_received (Linux 4.1)
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/net/peer_address.h"
#include "util/log.h"
#include "util/units.h"

namespace metaload {
namespace {

constexpr absl::Duration kLogInterval = absl::Seconds(10);
// What the watcher sees of a duplicate whose connection is gone or going: its client closed
// (RDHUP), or gRPC shut it down before closing it (HUP).
constexpr short kHungUp = POLLHUP | POLLRDHUP | POLLERR | POLLNVAL;
// A stream-reset flood: at least this many calls reset by their client within one window, and
// more of them than completed (a client that cancels a call now and then is never near it).
constexpr uint32_t kMinResetsPerWindow = 500;
constexpr absl::Duration kResetWindow = absl::Seconds(10);
// How often the bytes received by connections not yet authenticated are looked at.
constexpr absl::Duration kBytesCheckInterval = absl::Milliseconds(100);

// What the client of socket `fd` has sent so far (as its kernel received it); 0 when the kernel
// cannot say (not TCP, or older than Linux 4.1: the budget is then not enforced).
uint64_t BytesReceived(int fd) {
  tcp_info info{};
  socklen_t length = sizeof(info);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return 0;
  if (length < offsetof(tcp_info, tcpi_bytes_received) + sizeof(info.tcpi_bytes_received)) return 0;
  return info.tcpi_bytes_received;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreauthConnections>> PreauthConnections::Start(PreauthLimits limits,
                                                                              ConnectionCap* authenticated) {
  const int wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    return absl::InternalError(absl::StrCat("pre-auth connections: eventfd: ", std::strerror(errno)));
  }
  return std::unique_ptr<PreauthConnections>(new PreauthConnections(limits, authenticated, wake_fd));
}

PreauthConnections::PreauthConnections(PreauthLimits limits, ConnectionCap* authenticated, int wake_fd)
    : limits_(limits),
      authenticated_(authenticated),
      wake_fd_(wake_fd),
      refusals_(kLogInterval),
      timeouts_(kLogInterval),
      oversized_(kLogInterval),
      evictions_(kLogInterval),
      reset_floods_(kLogInterval) {
  thread_ = std::thread([this] { Run(); });
}

PreauthConnections::~PreauthConnections() {
  Stop();
  ::close(wake_fd_);
}

void PreauthConnections::Stop() {
  if (!thread_.joinable()) return;
  stopping_.store(true);
  Wake();
  thread_.join();
  absl::MutexLock lock(&mu_);
  for (auto& [address, entry] : by_address_) ::close(entry.duplicate_fd);
  by_address_.clear();
  per_host_.clear();
}

PreauthConnections::Admission PreauthConnections::Admit(int fd, int* error) {
  std::string host = SocketPeerHost(fd);
  // A full daemon refuses at once what could never be admitted once authenticated.
  if (!authenticated_->HasRoom(host)) return Admission::kRefused;
  std::string address = SocketPeerAddress(fd);
  absl::MutexLock lock(&mu_);
  auto from_host = per_host_.find(host);
  const char* refused_by = from_host != per_host_.end() && from_host->second >= limits_.max_per_client
                               ? "max_preauth_connections_per_client"
                               : nullptr;
  // Only a connection from the same address and port to another of the daemon's addresses can
  // collide with one held here (this one's socket is still open): it could not be told apart.
  if (refused_by == nullptr && (address.empty() || by_address_.contains(address))) {
    refused_by = "its client address and port are those of another connection";
  }
  if (refused_by != nullptr) {
    ++counts_.refused;
    if (const uint64_t refused = refusals_.Count(absl::Now()); refused != 0) {
      Log(LogLevel::kWarning,
          absl::StrCat("refused a connection from ", host.empty() ? "an unknown peer" : host, ": ", waiting_,
                       " connections not yet authenticated, ",
                       from_host == per_host_.end() ? 0 : from_host->second, " from that host (", refused_by,
                       "); ", refused, " refused since the last such line"),
          {{"event", "refused"},
           {"call", "a connection"},
           {"from", host},
           {"reason", refused_by},
           {"count", refused}});
    }
    return Admission::kRefused;
  }
  Entry entry;
  entry.duplicate_fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (entry.duplicate_fd < 0) {
    *error = errno == ENFILE ? ENFILE : EMFILE;
    return Admission::kNoDescriptor;
  }
  struct stat st;
  if (::fstat(entry.duplicate_fd, &st) != 0) {
    ::close(entry.duplicate_fd);
    return Admission::kRefused;
  }
  // All held (by hosts enough to fill it, each within its share): the oldest goes, not the new
  // one. Refusing the new one would let silent connections from a few hosts keep every other
  // client out; this way a client's connection is admitted, and is cut only if connections
  // from elsewhere come faster than its first call.
  if (waiting_ >= limits_.max_total) EvictOldestLocked(host);
  entry.inode = st.st_ino;
  entry.host = host;
  entry.deadline = absl::Now() + limits_.timeout;
  ++per_host_[host];
  ++waiting_;
  by_address_.emplace(std::move(address), std::move(entry));
  ++counts_.admitted;
  Wake();  // the watcher polls the new duplicate and may have a later deadline in mind
  return Admission::kAdmitted;
}

void PreauthConnections::Authenticated(absl::string_view grpc_peer) {
  const std::string address = GrpcPeerAddress(grpc_peer);
  if (address.empty()) return;
  absl::MutexLock lock(&mu_);
  auto found = by_address_.find(address);
  if (found == by_address_.end() || found->second.authenticated) return;
  Entry& entry = found->second;
  // Here, on the call's thread, before its handler answers: once a client has its answer, its
  // connection is counted as authenticated (the next connection it opens sees that).
  if (!authenticated_->Admit(entry.inode, entry.host)) {
    ++counts_.over_cap;
    DropLocked(address, /*shut_down=*/true);
    return;
  }
  ++counts_.authenticated;
  ReleaseShareLocked(entry);
  entry.authenticated = true;
  entry.window_start = absl::Now();
}

void PreauthConnections::CallEnded(absl::string_view grpc_peer, bool reset) {
  const std::string address = GrpcPeerAddress(grpc_peer);
  if (address.empty()) return;
  absl::MutexLock lock(&mu_);
  auto found = by_address_.find(address);
  if (found == by_address_.end() || !found->second.authenticated) return;
  Entry& entry = found->second;
  const absl::Time now = absl::Now();
  if (now - entry.window_start >= kResetWindow) {
    entry.window_start = now;
    entry.resets = entry.completed = 0;
  }
  ++(reset ? entry.resets : entry.completed);
  if (entry.resets < kMinResetsPerWindow || entry.resets <= entry.completed) return;
  const std::string host = entry.host;
  const uint32_t resets = entry.resets, completed = entry.completed;
  const absl::Duration took = absl::Trunc(now - entry.window_start, absl::Milliseconds(1));
  DropLocked(address, /*shut_down=*/true);
  ++counts_.reset_floods;
  Wake();
  if (const uint64_t cut = reset_floods_.Count(now); cut != 0) {
    LogWarning(absl::StrCat("closed a connection from ", host, " that reset ", resets,
                            " calls and completed ", completed, " in ", absl::FormatDuration(took),
                            " (an HTTP/2 stream-reset flood); ", cut, " closed so since the last such line"));
  }
}

uint32_t PreauthConnections::open() const {
  absl::MutexLock lock(&mu_);
  return waiting_;
}

PreauthConnections::Counts PreauthConnections::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

void PreauthConnections::Wake() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

void PreauthConnections::Run() {
  std::vector<pollfd> polled;
  std::vector<std::string> addresses;  // polled[i]'s
  std::vector<std::string> hung_up;
  absl::Time next_deadline = absl::InfiniteFuture();
  while (!stopping_.load()) {
    polled.clear();
    addresses.clear();
    {
      // A duplicate closed meanwhile (its connection authenticated) reads as hung up, or names
      // another file: either way its address is no longer listed, and the result is ignored.
      absl::MutexLock lock(&mu_);
      for (const auto& [address, entry] : by_address_) {
        polled.push_back(pollfd{entry.duplicate_fd, POLLRDHUP, 0});
        addresses.push_back(address);
      }
    }
    polled.push_back(pollfd{wake_fd_, POLLIN, 0});
    int timeout_ms = -1;
    if (next_deadline != absl::InfiniteFuture()) {
      // Rounded up, so that the deadline has passed when poll returns.
      timeout_ms = static_cast<int>(
          std::clamp<int64_t>(absl::ToInt64Milliseconds(next_deadline - absl::Now()) + 1, 0, 60'000));
    }
    if (::poll(polled.data(), polled.size(), timeout_ms) < 0 && errno != EINTR) {
      LogError(absl::StrCat("pre-auth connections: poll: ", std::strerror(errno)));
      absl::SleepFor(absl::Milliseconds(100));
    }
    if (polled.back().revents != 0) {
      uint64_t wakes;
      (void)!::read(wake_fd_, &wakes, sizeof(wakes));
    }
    hung_up.clear();
    for (size_t i = 0; i + 1 < polled.size(); ++i) {
      if ((polled[i].revents & kHungUp) != 0) hung_up.push_back(addresses[i]);
    }
    absl::MutexLock lock(&mu_);
    next_deadline = SettleLocked(hung_up, absl::Now());
  }
}

absl::Time PreauthConnections::SettleLocked(const std::vector<std::string>& hung_up, absl::Time now) {
  // Gone: gRPC drops its side by itself (shut down here too, in case only the client's half is).
  for (const std::string& address : hung_up) {
    if (by_address_.contains(address)) {
      DropLocked(address, /*shut_down=*/true);
      ++counts_.hung_up;
    }
  }
  std::vector<std::pair<absl::Time, std::string>> expired;
  std::vector<std::pair<std::string, uint64_t>> oversized;  // address, bytes received
  absl::Time next_deadline = absl::InfiniteFuture();
  for (const auto& [address, entry] : by_address_) {
    if (entry.authenticated) continue;
    if (entry.deadline <= now) {
      expired.emplace_back(entry.deadline, address);
      continue;
    }
    if (const uint64_t received = BytesReceived(entry.duplicate_fd); received > limits_.max_bytes) {
      oversized.emplace_back(address, received);
      continue;
    }
    next_deadline = std::min({next_deadline, entry.deadline, now + kBytesCheckInterval});
  }
  // Oldest first, not in the map's order: the one line logged per interval names the connection
  // that waited longest.
  std::sort(expired.begin(), expired.end());
  for (const auto& [deadline, address] : expired) {
    const std::string host = by_address_.find(address)->second.host;
    DropLocked(address, /*shut_down=*/true);
    ++counts_.timed_out;
    if (const uint64_t closed = timeouts_.Count(now); closed != 0) {
      LogWarning(absl::StrCat("closed a connection from ", host, " that had not authenticated within ",
                              absl::FormatDuration(limits_.timeout), " (preauth_timeout); ", closed,
                              " closed so since the last such line"));
    }
  }
  for (const auto& [address, received] : oversized) {
    const std::string host = by_address_.find(address)->second.host;
    DropLocked(address, /*shut_down=*/true);
    ++counts_.oversized;
    if (const uint64_t closed = oversized_.Count(now); closed != 0) {
      LogWarning(absl::StrCat("closed a connection from ", host, " that sent ", FormatBytes(received),
                              " before a call of its reached the service (max_preauth_bytes ",
                              FormatBytes(limits_.max_bytes), "); ", closed,
                              " closed so since the last such line"));
    }
  }
  return next_deadline;
}

void PreauthConnections::EvictOldestLocked(const std::string& for_host) {
  auto oldest = by_address_.end();
  for (auto it = by_address_.begin(); it != by_address_.end(); ++it) {
    if (it->second.authenticated) continue;
    if (oldest == by_address_.end() || it->second.deadline < oldest->second.deadline) oldest = it;
  }
  if (oldest == by_address_.end()) return;
  const std::string host = oldest->second.host;
  const absl::Duration age = absl::Now() - (oldest->second.deadline - limits_.timeout);
  DropLocked(std::string(oldest->first), /*shut_down=*/true);
  ++counts_.evicted;
  if (const uint64_t evicted = evictions_.Count(absl::Now()); evicted != 0) {
    LogWarning(absl::StrCat("closed a connection from ", host, " not yet authenticated after ",
                            absl::FormatDuration(absl::Trunc(age, absl::Milliseconds(1))),
                            " to admit one from ", for_host.empty() ? "an unknown peer" : for_host,
                            ": max_preauth_connections (", limits_.max_total, ") held; ", evicted,
                            " closed so since the last such line"));
  }
}

void PreauthConnections::DropLocked(const std::string& address, bool shut_down) {
  auto found = by_address_.find(address);
  if (found == by_address_.end()) return;
  // On our duplicate: the socket is gRPC's too, and gRPC sees it hung up and tears it down.
  if (shut_down) ::shutdown(found->second.duplicate_fd, SHUT_RDWR);
  ::close(found->second.duplicate_fd);
  if (!found->second.authenticated) ReleaseShareLocked(found->second);
  by_address_.erase(found);
}

void PreauthConnections::ReleaseShareLocked(const Entry& entry) {
  --waiting_;
  auto host = per_host_.find(entry.host);
  if (host != per_host_.end() && --host->second == 0) per_host_.erase(host);
}

}  // namespace metaload
