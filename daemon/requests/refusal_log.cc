#include "daemon/requests/refusal_log.h"

#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "daemon/net/occasional_log.h"
#include "util/log.h"

namespace metaload {
namespace {

constexpr absl::Duration kInterval = absl::Seconds(10);

// One OccasionalLog per (call, code): the keys are the daemon's RPC names and the status codes,
// a set the code bounds, whatever callers send.
struct Refusals {
  absl::Mutex mu;
  absl::flat_hash_map<std::pair<std::string, int>, OccasionalLog> by_kind ABSL_GUARDED_BY(mu);
};

Refusals& AllRefusals() {
  static Refusals* refusals = new Refusals();
  return *refusals;
}

}  // namespace

void LogRefusal(absl::string_view call, absl::string_view from, const absl::Status& why) {
  uint64_t count = 0;
  {
    Refusals& refusals = AllRefusals();
    absl::MutexLock lock(&refusals.mu);
    auto [it, added] = refusals.by_kind.try_emplace(
        std::make_pair(std::string(call), static_cast<int>(why.code())), kInterval);
    count = it->second.Count(absl::Now());
  }
  if (count == 0) return;
  const std::string code = absl::StatusCodeToString(why.code());
  std::string line =
      absl::StrCat("refused ", call, from.empty() ? "" : " from ", from, ": ", code, ": ", why.message());
  if (count > 1) {
    absl::StrAppend(&line, " (and ", count - 1, " more ", call, " refused with ", code,
                    " since the last such line)");
  }
  Log(LogLevel::kWarning, line,
      {{"event", "refused"},
       {"call", call},
       {"from", from},
       {"code", code},
       {"reason", why.message()},
       {"count", count}});
}

}  // namespace metaload
