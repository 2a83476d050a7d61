#include "daemon/serving/served_ranges_cache.h"

#include "absl/strings/str_cat.h"
#include "util/identifiers.h"
#include "util/log.h"

namespace metaload {
namespace {

// Model names a cache remembers before it starts afresh: names come from requests, and a
// stream of made-up ones must not grow the daemon.
constexpr size_t kMaxEntries = 1024;

}  // namespace

ServedRangesCache::ServedRangesCache(Fetch fetch, Options options, std::function<absl::Time()> clock)
    : fetch_(std::move(fetch)), options_(options), clock_(std::move(clock)) {}

absl::StatusOr<std::shared_ptr<const ServedRanges>> ServedRangesCache::Get(const std::string& model,
                                                                           absl::Duration max_age,
                                                                           absl::Time* fetched_at) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(model);
  if (it == entries_.end()) {
    if (entries_.size() >= kMaxEntries) {
      for (auto e = entries_.begin(); e != entries_.end();)
        e = e->second->fetching ? std::next(e) : entries_.erase(e);
    }
    it = entries_.emplace(model, std::make_shared<Entry>()).first;
  }
  std::shared_ptr<Entry> entry = it->second;
  while (true) {
    mu_.Await(absl::Condition(
        +[](Entry* e) { return !e->fetching; }, entry.get()));
    if (entry->fetched && clock_() - entry->fetched_at <= max_age) break;
    entry->fetching = true;
    mu_.Unlock();
    absl::StatusOr<ServedRanges> fetched = fetch_(model);
    mu_.Lock();
    entry->fetching = false;
    if (fetched.ok()) {
      // The same answer again keeps the one held: its files' verdicts still hold.
      if (!entry->ranges.ok() || !(*entry->ranges)->SameClaims(*fetched))
        entry->ranges = std::make_shared<const ServedRanges>(*std::move(fetched));
    } else if (!absl::IsNotFound(fetched.status()) && entry->fetched && entry->ranges.ok()) {
      LogWarning(absl::StrCat("ReadRange: serving model ", model,
                              " as last known; asking again failed: ", fetched.status().message()));
    } else {
      entry->ranges = fetched.status();
    }
    entry->fetched = true;
    entry->fetched_at = clock_();
    break;
  }
  *fetched_at = entry->fetched_at;
  return entry->ranges;
}

absl::StatusOr<std::shared_ptr<const ServedRanges>> ServedRangesCache::Check(const std::string& model,
                                                                             const std::string& path,
                                                                             const StridedRuns& runs) {
  using Ranges = absl::StatusOr<std::shared_ptr<const ServedRanges>>;
  const auto check = [&](Ranges ranges) -> Ranges {
    if (ranges.ok()) {
      if (absl::Status inside = (*ranges)->Check(path, runs); !inside.ok()) return inside;
      return ranges;
    }
    if (!absl::IsNotFound(ranges.status())) return ranges.status();
    return absl::PermissionDeniedError(
        absl::StrCat("ReadRange: ", QuoteForMessage(path, 512),
                     " is not a file of a registered model: ", ranges.status().message()));
  };
  absl::Time fetched_at;
  Ranges allowed = check(Get(model, options_.fresh_for, &fetched_at));
  if (allowed.ok() || clock_() - fetched_at < options_.min_refetch) return allowed;
  return check(Get(model, options_.min_refetch, &fetched_at));  // registered a moment ago?
}

void ServedRangesCache::Forget(const std::string& model) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(model);
  if (it == entries_.end()) return;
  // Not kept as a fallback either: it may have been unregistered through this daemon.
  it->second->ranges =
      absl::NotFoundError(absl::StrCat("model ", QuoteForMessage(model), " is not known yet"));
  it->second->fetched = false;
}

}  // namespace metaload
