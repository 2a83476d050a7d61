// The architecture registry: the built-in table (architectures/architecture_table.h), then the
// records tests register.
#include "planner/skeleton/hf/architecture_registry.h"

#include "absl/strings/str_cat.h"
#include "planner/record_registry.h"
#include "planner/skeleton/hf/architectures/architecture_table.h"
#include "planner/skeleton/hf/hf_config.h"

namespace metaload {
namespace {

RecordRegistry<Architecture>& Registry() {
  static auto* const registry =
      new RecordRegistry<Architecture>({METALOAD_BUILT_IN_ARCHITECTURES(METALOAD_RECORD_ADDRESS)});
  return *registry;
}

// The first class of `architectures` for which `matches` holds.
template <typename Matches>
HfClassMatch FindClassIn(const std::vector<const Architecture*>& architectures, Matches matches) {
  for (const Architecture* architecture : architectures) {
    for (const HfClass& hf_class : architecture->classes) {
      if (matches(hf_class)) return HfClassMatch{architecture, &hf_class};
    }
  }
  return HfClassMatch{};
}

}  // namespace

HfClassMatch FindHfArchitecture(absl::string_view architecture) {
  return Registry().Visit([&](const std::vector<const Architecture*>& architectures) {
    return FindClassIn(architectures, [&](const HfClass& c) { return c.architecture == architecture; });
  });
}

HfClassMatch FindHfModelType(absl::string_view model_type) {
  return Registry().Visit([&](const std::vector<const Architecture*>& architectures) {
    return FindClassIn(architectures, [&](const HfClass& c) { return c.model_type == model_type; });
  });
}

// Declared in hf_config.h, its public home.
std::vector<std::string> SupportedHfArchitectures() {
  std::vector<std::string> names;
  for (const Architecture* architecture : Registry().All()) {
    for (const HfClass& hf_class : architecture->classes) {
      if (hf_class.loads_as.empty()) names.emplace_back(hf_class.architecture);
    }
  }
  return names;
}

const ModuleTpRule* FindModuleTpRule(absl::string_view module, absl::string_view owner) {
  // Once per tensor of a tp plan: looked up in place, without copying the list.
  return Registry().Visit([&](const std::vector<const Architecture*>& architectures) -> const ModuleTpRule* {
    for (const Architecture* architecture : architectures) {
      for (const ModuleTpRule& rule : architecture->tp_rules) {
        if (rule.module == module && (rule.owner.empty() || rule.owner == owner)) return &rule;
      }
    }
    return nullptr;
  });
}

absl::Status RegisterArchitecture(const Architecture& record) {
  if (record.classes.empty() || record.build == nullptr) {
    return absl::InvalidArgumentError("an architecture needs classes and a builder to be registered");
  }
  return Registry().Add(record, [&](const std::vector<const Architecture*>& architectures) {
    for (const HfClass& hf_class : record.classes) {
      auto taken = [&](const HfClass& c) {
        return c.architecture == hf_class.architecture || c.model_type == hf_class.model_type;
      };
      if (FindClassIn(architectures, taken).architecture != nullptr) {
        return absl::AlreadyExistsError(absl::StrCat("architecture ", hf_class.architecture,
                                                     " (model_type \"", hf_class.model_type,
                                                     "\") is registered already"));
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace metaload
