#include "daemon/net/connection_cap.h"

#include <sys/stat.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/net/peer_address.h"
#include "daemon/net/tcp_sockets.h"
#include "util/log.h"

namespace metaload {
namespace {

constexpr absl::Duration kMinPruneInterval = absl::Milliseconds(100);
constexpr absl::Duration kRefusalLogInterval = absl::Seconds(10);

// The socket `fd` names now; false when it names none.
bool SocketInode(int fd, ino_t& inode) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  inode = st.st_ino;
  return true;
}

}  // namespace

ConnectionCap::ConnectionCap(uint32_t max_total, uint32_t max_per_client)
    : max_total_(max_total),
      max_per_client_(max_per_client),
      admissions_per_prune_(std::max<uint32_t>(1, max_per_client / 4)),
      refusals_(kRefusalLogInterval) {}

bool ConnectionCap::Admit(int fd) {
  ino_t inode;
  if (!SocketInode(fd, inode)) return false;
  return Admit(inode, SocketPeerHost(fd));
}

bool ConnectionCap::Admit(ino_t inode, std::string host) {
  absl::MutexLock lock(&mu_);
  Forget(inode);  // an inode number is a live socket's alone: an entry with it is long gone
  if (const char* refused_by = RefusalLocked(host); refused_by != nullptr) {
    LogRefusalLocked(host, refused_by);
    return false;
  }
  ++per_host_[host];
  by_inode_.emplace(inode, std::move(host));
  ++admitted_since_prune_;
  return true;
}

bool ConnectionCap::HasRoom(const std::string& host) {
  absl::MutexLock lock(&mu_);
  if (const char* refused_by = RefusalLocked(host); refused_by != nullptr) {
    LogRefusalLocked(host, refused_by);
    return false;
  }
  return true;
}

const char* ConnectionCap::RefusalLocked(const std::string& host) {
  auto at_limit = [&]() -> const char* {
    if (by_inode_.size() >= max_total_) return "max_connections";
    auto from_host = per_host_.find(host);
    if (from_host != per_host_.end() && from_host->second >= max_per_client_)
      return "max_connections_per_client";
    return nullptr;
  };
  const char* refused_by = at_limit();
  // The list is asked again when the last answer is 100 ms old, or sooner when enough were
  // admitted since: connections gRPC closed meanwhile (a connect/close loop) must not keep a
  // host out, and each dump is paid for by admissions, never by refusals alone.
  if (refused_by != nullptr &&
      (absl::Now() - last_prune_ >= kMinPruneInterval || admitted_since_prune_ >= admissions_per_prune_)) {
    PruneLocked();
    refused_by = at_limit();
  }
  return refused_by;
}

void ConnectionCap::Prune() {
  absl::MutexLock lock(&mu_);
  PruneLocked();
}

uint32_t ConnectionCap::open() const {
  absl::MutexLock lock(&mu_);
  return static_cast<uint32_t>(by_inode_.size());
}

void ConnectionCap::PruneLocked() {
  last_prune_ = absl::Now();
  admitted_since_prune_ = 0;
  if (by_inode_.empty()) return;  // nothing to drop: spare the dump of every TCP socket
  absl::StatusOr<absl::flat_hash_set<ino_t>> open = OpenTcpSocketInodes();
  // Out of descriptors for the query: keep the counts until it can be asked again.
  if (absl::IsResourceExhausted(open.status())) return;
  if (!open.ok()) {
    // Without sock_diag nothing could ever be dropped, and the limits would end by refusing
    // every connection: count none rather than all.
    if (!warned_no_sock_diag_) {
      LogWarning(absl::StrCat("max_connections is not enforced: cannot list open TCP sockets (",
                              open.status().message(), ")"));
      warned_no_sock_diag_ = true;
    }
    by_inode_.clear();
    per_host_.clear();
    return;
  }
  std::vector<ino_t> gone;
  for (const auto& [inode, host] : by_inode_) {
    if (!open->contains(inode)) gone.push_back(inode);
  }
  for (ino_t inode : gone) Forget(inode);
}

void ConnectionCap::Forget(ino_t inode) {
  auto found = by_inode_.find(inode);
  if (found == by_inode_.end()) return;
  auto host = per_host_.find(found->second);
  if (host != per_host_.end() && --host->second == 0) per_host_.erase(host);
  by_inode_.erase(found);
}

void ConnectionCap::LogRefusalLocked(const std::string& host, const char* key) {
  const uint64_t refused = refusals_.Count(absl::Now());
  if (refused == 0) return;
  const auto from_host = per_host_.find(host);
  Log(LogLevel::kWarning,
      absl::StrCat("refused a connection from ", host.empty() ? "an unknown peer" : host, ": ",
                   by_inode_.size(), " connections open, ",
                   from_host == per_host_.end() ? 0 : from_host->second, " from that host (", key, "); ",
                   refused, " refused since the last such line"),
      {{"event", "refused"}, {"call", "a connection"}, {"from", host}, {"reason", key}, {"count", refused}});
}

}  // namespace metaload
