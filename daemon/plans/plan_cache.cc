#include "daemon/plans/plan_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/plans/plan_digest.h"

namespace metaload {

PlanCache::PlanCache(Options options) : options_(options) {}

absl::StatusOr<std::shared_ptr<const PlannedModel>> PlanCache::Get(
    std::shared_ptr<const RegisteredModel> model, std::vector<NodeSpec> members, int world_size,
    const StrategyOptions& options) {
  const std::string key = absl::StrCat(model->record.name, "\n", model->version, "\n", OptionsKey(options),
                                       "\n", world_size, "\n", MembersKey(members));
  std::shared_ptr<Flight> flight;
  bool compute = false;
  {
    absl::MutexLock lock(&mu_);
    auto cached =
        std::find_if(plans_.begin(), plans_.end(), [&](const auto& entry) { return entry.first == key; });
    if (cached != plans_.end()) {
      plans_.splice(plans_.begin(), plans_, cached);
      flight = cached->second;
    } else {
      flight = std::make_shared<Flight>();
      compute = true;
      plans_.emplace_front(key, flight);
      while (plans_.size() > static_cast<size_t>(options_.cached_plans)) plans_.pop_back();
    }
  }
  if (compute) {
    auto result = PlanModel(std::move(model), std::move(members), world_size, options);
    absl::MutexLock lock(&flight->mu);
    flight->result = std::move(result);
    flight->done = true;
  }
  absl::MutexLock lock(&flight->mu);
  flight->mu.Await(absl::Condition(&flight->done));
  return flight->result;
}

}  // namespace metaload
