// The strategy registry: the built-in table (strategies/strategy_table.h), then the records
// tests register.
#include "planner/strategy/strategy_registry.h"

#include "absl/strings/str_cat.h"
#include "planner/record_registry.h"
#include "planner/strategy/strategies/strategy_table.h"

namespace metaload {
namespace {

// Flags every strategy shares (strategy_flags.h): no strategy may take one of their names.
constexpr absl::string_view kCommonFlags[] = {"strategy", "reserve", "dtype"};

RecordRegistry<Strategy>& Registry() {
  static auto* const registry =
      new RecordRegistry<Strategy>({METALOAD_BUILT_IN_STRATEGIES(METALOAD_RECORD_ADDRESS)});
  return *registry;
}

// Why `record` cannot join `strategies`: its name or one of its flags is taken.
absl::Status CheckUnique(const Strategy& record, const std::vector<const Strategy*>& strategies) {
  for (const Strategy* strategy : strategies) {
    if (strategy->name == record.name) {
      return absl::AlreadyExistsError(absl::StrCat("strategy \"", record.name, "\" is registered already"));
    }
    for (const StrategyFlag& own : strategy->flags) {
      for (const StrategyFlag& flag : record.flags) {
        if (own.name == flag.name) {
          return absl::AlreadyExistsError(absl::StrCat("strategy \"", record.name, "\": flag --", flag.name,
                                                       " is strategy ", strategy->name, "'s"));
        }
      }
    }
  }
  for (const StrategyFlag& flag : record.flags) {
    for (absl::string_view common : kCommonFlags) {
      if (flag.name == common) {
        return absl::AlreadyExistsError(
            absl::StrCat("strategy \"", record.name, "\": flag --", flag.name, " is every strategy's"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

const Strategy* FindStrategy(absl::string_view name) {
  return Registry().Find([&](const Strategy& strategy) { return strategy.name == name; });
}

std::vector<const Strategy*> Strategies() { return Registry().All(); }

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
  return Registry().Add(record, [&](const std::vector<const Strategy*>& strategies) {
    return CheckUnique(record, strategies);
  });
}

}  // namespace metaload
