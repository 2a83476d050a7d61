// Parsing a non-persistent buffer's init rule (grammar in docs/skeleton-format.md, "Init
// rules"), e.g. "rope_inv_freq(base=500000,dim=128,scaling=llama3(factor=8,...))". The
// rank evaluates it (client/resolve/buffer_init.h); parsing is pure so the planner and tests can
// check rules without LibTorch.
#ifndef METALOAD_PLANNER_SKELETON_INIT_RULE_H_
#define METALOAD_PLANNER_SKELETON_INIT_RULE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace metaload {

struct InitRule;

struct InitRuleValue {
  enum class Kind { kNumber, kBool, kList, kRule };
  Kind kind = Kind::kNumber;
  double number = 0;
  bool boolean = false;
  std::vector<double> list;
  std::shared_ptr<InitRule> rule;
};

struct InitRule {
  std::string name;
  std::vector<std::pair<std::string, InitRuleValue>> args;  // in written order

  const InitRuleValue* Find(absl::string_view arg) const;
  // InvalidArgument naming the rule and argument when absent or of another kind.
  absl::StatusOr<double> Number(absl::string_view arg) const;
  absl::StatusOr<bool> Bool(absl::string_view arg) const;
};

// InvalidArgument naming the rule text and the position of the problem.
absl::StatusOr<InitRule> ParseInitRule(absl::string_view text);

}  // namespace metaload

#endif  // METALOAD_PLANNER_SKELETON_INIT_RULE_H_
