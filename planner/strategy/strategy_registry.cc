// The strategy registry: the built-in table (strategies/strategy_table.h), then the records
// tests register, behind one mutex.
#include "planner/strategy/strategy_registry.h"

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "planner/strategy/strategies/strategy_table.h"

namespace metaload {
namespace {

// Flags every strategy shares (strategy_flags.h): no strategy may take one of their names.
constexpr absl::string_view kCommonFlags[] = {"strategy", "reserve", "dtype"};

struct Registry {
  absl::Mutex mu;
  std::vector<const Strategy*> strategies ABSL_GUARDED_BY(mu);
};

Registry& TheRegistry() {
  static Registry* const registry = [] {
    auto* r = new Registry;
    absl::MutexLock lock(&r->mu);
#define METALOAD_ADD_STRATEGY(record) r->strategies.push_back(&record);
    METALOAD_BUILT_IN_STRATEGIES(METALOAD_ADD_STRATEGY)
#undef METALOAD_ADD_STRATEGY
    return r;
  }();
  return *registry;
}

// The strategy that takes `flag`, or nullptr.
const Strategy* OwnerOfFlag(const std::vector<const Strategy*>& strategies, absl::string_view flag) {
  for (const Strategy* strategy : strategies) {
    for (const StrategyFlag& own : strategy->flags) {
      if (own.name == flag) return strategy;
    }
  }
  return nullptr;
}

}  // namespace

const Strategy* FindStrategy(absl::string_view name) {
  Registry& registry = TheRegistry();
  absl::ReaderMutexLock lock(&registry.mu);
  for (const Strategy* strategy : registry.strategies) {
    if (strategy->name == name) return strategy;
  }
  return nullptr;
}

std::vector<const Strategy*> Strategies() {
  Registry& registry = TheRegistry();
  absl::ReaderMutexLock lock(&registry.mu);
  return registry.strategies;
}

std::string StrategyNames() {
  std::string names;
  for (const Strategy* strategy : Strategies())
    absl::StrAppend(&names, names.empty() ? "" : ", ", strategy->name);
  return names;
}

absl::Status RegisterStrategy(const Strategy& record) {
  if (record.name.empty() || record.plan == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("strategy \"", record.name, "\" needs a name and a plan function to be registered"));
  }
  Registry& registry = TheRegistry();
  absl::MutexLock lock(&registry.mu);
  for (const Strategy* strategy : registry.strategies) {
    if (strategy->name == record.name) {
      return absl::AlreadyExistsError(absl::StrCat("strategy \"", record.name, "\" is registered already"));
    }
  }
  for (const StrategyFlag& flag : record.flags) {
    const Strategy* owner = OwnerOfFlag(registry.strategies, flag.name);
    bool common = false;
    for (absl::string_view name : kCommonFlags) common = common || name == flag.name;
    if (owner != nullptr || common) {
      return absl::AlreadyExistsError(absl::StrCat(
          "strategy \"", record.name, "\": flag --", flag.name, " is taken by ",
          owner != nullptr ? absl::StrCat("strategy ", owner->name) : std::string("every strategy")));
    }
  }
  registry.strategies.push_back(&record);
  return absl::OkStatus();
}

}  // namespace metaload
