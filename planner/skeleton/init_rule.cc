#include "planner/skeleton/init_rule.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace metaload {
namespace {

// Recursive descent over the rule text; `pos_` only moves forward.
class RuleParser {
 public:
  explicit RuleParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<InitRule> ParseWhole() {
    auto rule = ParseRule(0);
    if (!rule.ok()) return rule.status();
    if (pos_ != text_.size()) return Error("unexpected text after the rule");
    return rule;
  }

 private:
  static constexpr int kMaxDepth = 8;

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("init rule \"", text_, "\": ", what, " at position ", pos_));
  }
  bool Eat(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  std::string Name() {
    size_t start = pos_;
    while (pos_ < text_.size() && (absl::ascii_islower(text_[pos_]) || text_[pos_] == '_' ||
                                   (pos_ > start && absl::ascii_isdigit(text_[pos_])))) {
      ++pos_;
    }
    return std::string(text_.substr(start, pos_ - start));
  }
  absl::StatusOr<double> Number() {
    size_t start = pos_;
    while (pos_ < text_.size() &&
           (absl::ascii_isdigit(text_[pos_]) || text_[pos_] == '-' || text_[pos_] == '+' ||
            text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
    }
    std::string digits(text_.substr(start, pos_ - start));
    char* end = nullptr;
    double value = std::strtod(digits.c_str(), &end);
    if (digits.empty() || *end != '\0') {
      pos_ = start;
      return Error("expected a number");
    }
    return value;
  }

  absl::StatusOr<InitRule> ParseRule(int depth) {
    if (depth > kMaxDepth) return Error("rules nest too deep");
    InitRule rule;
    rule.name = Name();
    if (rule.name.empty()) return Error("expected a rule name");
    if (!Eat('(')) return Error("expected '('");
    if (Eat(')')) return rule;
    do {
      std::string arg = Name();
      if (arg.empty()) return Error("expected an argument name");
      if (!Eat('=')) return Error("expected '='");
      auto value = ParseValue(depth);
      if (!value.ok()) return value.status();
      rule.args.emplace_back(std::move(arg), std::move(*value));
    } while (Eat(','));
    if (!Eat(')')) return Error("expected ',' or ')'");
    return rule;
  }

  absl::StatusOr<InitRuleValue> ParseValue(int depth) {
    InitRuleValue value;
    if (pos_ < text_.size() && absl::ascii_islower(text_[pos_])) {
      if (text_.substr(pos_, 4) == "true" && (pos_ + 4 == text_.size() || text_[pos_ + 4] != '(')) {
        pos_ += 4;
        value.kind = InitRuleValue::Kind::kBool;
        value.boolean = true;
        return value;
      }
      if (text_.substr(pos_, 5) == "false" && (pos_ + 5 == text_.size() || text_[pos_ + 5] != '(')) {
        pos_ += 5;
        value.kind = InitRuleValue::Kind::kBool;
        return value;
      }
      auto rule = ParseRule(depth + 1);
      if (!rule.ok()) return rule.status();
      value.kind = InitRuleValue::Kind::kRule;
      value.rule = std::make_shared<InitRule>(std::move(*rule));
      return value;
    }
    if (Eat('[')) {
      value.kind = InitRuleValue::Kind::kList;
      if (Eat(']')) return value;
      do {
        auto number = Number();
        if (!number.ok()) return number.status();
        value.list.push_back(*number);
      } while (Eat(','));
      if (!Eat(']')) return Error("expected ',' or ']'");
      return value;
    }
    auto number = Number();
    if (!number.ok()) return number.status();
    value.number = *number;
    return value;
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

const InitRuleValue* InitRule::Find(absl::string_view arg) const {
  for (const auto& [name, value] : args) {
    if (name == arg) return &value;
  }
  return nullptr;
}

absl::StatusOr<double> InitRule::Number(absl::string_view arg) const {
  const InitRuleValue* value = Find(arg);
  if (value == nullptr || value->kind != InitRuleValue::Kind::kNumber) {
    return absl::InvalidArgumentError(absl::StrCat("init rule ", name, ": needs a number ", arg, "=..."));
  }
  return value->number;
}

absl::StatusOr<bool> InitRule::Bool(absl::string_view arg) const {
  const InitRuleValue* value = Find(arg);
  if (value == nullptr || value->kind != InitRuleValue::Kind::kBool) {
    return absl::InvalidArgumentError(absl::StrCat("init rule ", name, ": needs ", arg, "=true|false"));
  }
  return value->boolean;
}

absl::StatusOr<InitRule> ParseInitRule(absl::string_view text) { return RuleParser(text).ParseWhole(); }

}  // namespace metaload
