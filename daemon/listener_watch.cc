#include "daemon/listener_watch.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace metaload {
namespace {

// Parses /proc/net/tcp{,6} lines: "sl local_address rem_address st tx_queue:rx_queue ...",
// addresses as HEXIP:HEXPORT, st 0A = LISTEN.
int64_t BacklogIn(const char* table, int port, bool* found, bool* readable) {
  std::ifstream in(table);
  if (!in) {
    *readable = false;
    return -1;
  }
  std::string line;
  std::getline(in, line);  // header
  int64_t backlog = -1;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues;
    if (!(fields >> slot >> local >> remote >> state >> queues)) continue;
    if (state != "0A") continue;
    const size_t colon = local.rfind(':');
    if (colon == std::string::npos || std::strtol(local.c_str() + colon + 1, nullptr, 16) != port) continue;
    const size_t q = queues.find(':');
    if (q == std::string::npos) continue;
    *found = true;
    backlog = std::max<int64_t>(backlog, std::strtoll(queues.c_str() + q + 1, nullptr, 16));
  }
  return backlog;
}

}  // namespace

FdLimit RaiseFdLimit() {
  struct rlimit limit;
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return {};
  if (limit.rlim_cur < limit.rlim_max) {
    struct rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return FdLimit{static_cast<uint64_t>(limit.rlim_cur), static_cast<uint64_t>(limit.rlim_max)};
}

int64_t OpenFdCount() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int64_t count = 0;
  while (struct dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count - 1;  // the directory's own descriptor
}

int64_t ListenBacklog(int port) {
  bool found = false, readable = true;
  const int64_t v4 = BacklogIn("/proc/self/net/tcp", port, &found, &readable);
  const int64_t v6 = BacklogIn("/proc/self/net/tcp6", port, &found, &readable);
  if (found) return std::max(v4, v6);
  return readable ? kNotListening : kUnknown;
}

bool ListenerWatch::Stalled(int64_t backlog) {
  if (backlog == kUnknown) return false;
  if (backlog == kNotListening) {
    waiting_ = 0;
    return true;
  }
  waiting_ = backlog > 0 ? waiting_ + 1 : 0;
  if (waiting_ < stalled_samples_) return false;
  waiting_ = 0;
  return true;
}

}  // namespace metaload
