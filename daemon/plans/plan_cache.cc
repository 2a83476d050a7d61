#include "daemon/plans/plan_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/plans/plan_digest.h"
#include "util/error_kind.h"
#include "util/units.h"

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
      // Refused before it is built when it could never be held; else its bound is held while it
      // is built, so that the plans in construction count against max_bytes too.
      const uint64_t bound = PlanBytesBound(*model, members, world_size);
      if (bound > options_.max_bytes) return TooLarge(*model, members, world_size, bound);
      flight = std::make_shared<Flight>();
      compute = true;
      plans_.push_front(Entry{key, flight, bound, /*done=*/false});
      held_bytes_ += bound;
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
    if (held != plans_.end()) {  // still held: count what it holds, first in line, within the limits
      held_bytes_ = held_bytes_ - held->bytes + bytes;
      held->bytes = bytes;
      held->done = true;
      plans_.splice(plans_.begin(), plans_, held);
      EvictLocked();
    }
  }
  absl::MutexLock lock(&flight->mu);
  flight->mu.Await(absl::Condition(&flight->done));
  return flight->result;
}

absl::Status PlanCache::TooLarge(const RegisteredModel& model, const std::vector<NodeSpec>& members,
                                 int world_size, uint64_t bound) const {
  const uint64_t ranks = ResolvedWorldSize(members, world_size);
  // Over a configured limit: the request or the configuration is to change, and trying again
  // does not help (exit 2, not busy).
  return WithErrorKind(absl::ResourceExhaustedError(absl::StrCat(
                           "a plan of ", model.record.name, " for ", ranks, " ranks (",
                           model.skeleton.tensors.size(), " tensors) may hold up to ", FormatBytes(bound),
                           ", more than plan_cache_size (", FormatBytes(options_.max_bytes),
                           "): ask for fewer ranks, or raise plan_cache_size in the node "
                           "config of the daemon that plans")),
                       ErrorKind::kBadInput);
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
    if (cached == nullptr || !cached->done) return nullptr;  // absent, or in construction
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
  for (const Entry& entry : plans_) done += entry.done ? 1 : 0;
  return done;
}

uint64_t PlanCache::held_bytes() const {
  absl::MutexLock lock(&mu_);
  return held_bytes_;
}

}  // namespace metaload
