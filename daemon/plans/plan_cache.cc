#include "daemon/plans/plan_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/plans/plan_digest.h"

namespace metaload {

PlanCache::PlanCache(Options options) : options_(options) {}

absl::StatusOr<std::shared_ptr<const PlannedModel>> PlanCache::Get(
    std::shared_ptr<const RegisteredModel> model, std::vector<NodeSpec> members, int world_size,
    const StrategyOptions& options) {
  const std::string key = Key(*model, members, world_size, options);
  std::shared_ptr<Flight> flight;
  bool compute = false;
  {
    absl::MutexLock lock(&mu_);
    if (const Entry* cached = UseLocked(key); cached != nullptr) {
      flight = cached->flight;
    } else {
      flight = std::make_shared<Flight>();
      compute = true;
      plans_.push_front(Entry{key, flight, 0});
      EvictLocked();
    }
  }
  if (compute) {
    auto result = PlanModel(std::move(model), std::move(members), world_size, options);
    const uint64_t bytes = result.ok() ? HeldBytes(**result) : 0;
    {
      absl::MutexLock lock(&flight->mu);
      flight->result = std::move(result);
      flight->done = true;
    }
    absl::MutexLock lock(&mu_);
    auto held =
        std::find_if(plans_.begin(), plans_.end(), [&](const Entry& e) { return e.flight == flight; });
    if (held != plans_.end()) {  // still held: count it, first in line, then keep within the limits
      held->bytes = bytes;
      held_bytes_ += bytes;
      plans_.splice(plans_.begin(), plans_, held);
      EvictLocked();
    }
  }
  absl::MutexLock lock(&flight->mu);
  flight->mu.Await(absl::Condition(&flight->done));
  return flight->result;
}

std::string PlanCache::Key(const RegisteredModel& model, const std::vector<NodeSpec>& members, int world_size,
                           const StrategyOptions& options) {
  return absl::StrCat(model.record.name, "\n", model.version, "\n", OptionsKey(options), "\n", world_size,
                      "\n", MembersKey(members));
}

std::shared_ptr<const PlannedModel> PlanCache::Cached(const RegisteredModel& model,
                                                      const std::vector<NodeSpec>& members, int world_size,
                                                      const StrategyOptions& options) {
  const std::string key = Key(model, members, world_size, options);
  std::shared_ptr<Flight> flight;
  {
    absl::MutexLock lock(&mu_);
    const Entry* cached = UseLocked(key);
    if (cached == nullptr || cached->bytes == 0) return nullptr;  // absent, or in flight
    flight = cached->flight;
  }
  absl::MutexLock lock(&flight->mu);
  return flight->done && flight->result.ok() ? *flight->result : nullptr;
}

const PlanCache::Entry* PlanCache::UseLocked(const std::string& key) {
  auto cached =
      std::find_if(plans_.begin(), plans_.end(), [&](const Entry& entry) { return entry.key == key; });
  if (cached == plans_.end()) return nullptr;
  plans_.splice(plans_.begin(), plans_, cached);
  return &plans_.front();
}

void PlanCache::EvictLocked() {
  while (plans_.size() > 1 &&
         (plans_.size() > static_cast<size_t>(options_.cached_plans) || held_bytes_ > options_.max_bytes)) {
    held_bytes_ -= plans_.back().bytes;
    plans_.pop_back();  // its waiters hold the flight: they still get their plan
  }
}

size_t PlanCache::plans() const {
  absl::MutexLock lock(&mu_);
  size_t done = 0;
  for (const Entry& entry : plans_) done += entry.bytes > 0 ? 1 : 0;
  return done;
}

uint64_t PlanCache::held_bytes() const {
  absl::MutexLock lock(&mu_);
  return held_bytes_;
}

}  // namespace metaload
