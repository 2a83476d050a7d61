// Tensor-parallel rules: a skeleton's own by glob, else the architectures' by module name.
#include "planner/strategy/strategies/tp_rules.h"

#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace metaload {
namespace {

// The module name (last component before ".weight"/".bias"): "q_proj".
absl::string_view ModuleName(absl::string_view parent) {
  const size_t dot = parent.rfind('.');
  return dot == absl::string_view::npos ? parent : parent.substr(dot + 1);
}

// The name of the module holding `parent`: "self_attn" for "model.layers.0.self_attn.q_proj".
absl::string_view OwnerName(absl::string_view parent) {
  const size_t dot = parent.rfind('.');
  return dot == absl::string_view::npos ? absl::string_view() : ModuleName(parent.substr(0, dot));
}

}  // namespace

int BuiltInTpSplitDim(absl::string_view tensor_name, size_t dims) {
  return BuiltInTpSplit(tensor_name, dims).dim;
}

TpSplitRule BuiltInTpSplit(absl::string_view tensor_name, size_t dims) {
  absl::string_view parent = tensor_name;
  bool is_bias = false;
  if (absl::ConsumeSuffix(&parent, ".weight")) {
  } else if (absl::ConsumeSuffix(&parent, ".bias")) {
    is_bias = true;
  } else {
    return {};  // buffers and unusual parameters
  }
  const ModuleTpRule* rule = FindModuleTpRule(ModuleName(parent), OwnerName(parent));
  if (rule == nullptr) return {};
  int dim = kTpReplicate;
  switch (rule->parallel) {
    case TpParallel::kColumn:
      dim = is_bias || !rule->transposed ? 0 : 1;
      break;
    case TpParallel::kRow:
      dim = is_bias ? kTpReplicate : (rule->transposed ? 0 : 1);
      break;
    case TpParallel::kVocab:
      dim = is_bias ? kTpReplicate : 0;
      break;
  }
  if (dim == kTpReplicate || static_cast<size_t>(dim) >= dims) return {};
  return {dim, rule->heads, rule->parts};
}

bool GlobMatches(absl::string_view pattern, absl::string_view name) {
  // Greedy with backtracking to the last `*`: linear for the patterns people write.
  size_t p = 0, n = 0, star = absl::string_view::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p;
      ++n;
    } else if (star != absl::string_view::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

TpSplitRule TpSplitOf(const std::vector<TpRule>& rules, absl::string_view tensor_name, size_t dims) {
  for (const TpRule& rule : rules) {
    if (!GlobMatches(rule.pattern, tensor_name)) continue;
    int dim = kTpReplicate;
    if (rule.split == "column") {
      dim = 0;
    } else if (rule.split == "row") {
      dim = dims >= 2 ? 1 : kTpReplicate;
    } else if (rule.split == "dim") {
      dim = rule.dim;
    }
    if (dim == kTpReplicate || static_cast<size_t>(dim) >= dims) return {};
    return {dim, TpHeads::kNone, ""};
  }
  return BuiltInTpSplit(tensor_name, dims);
}

int TpSplitDim(const std::vector<TpRule>& rules, absl::string_view tensor_name, size_t dims) {
  return TpSplitOf(rules, tensor_name, dims).dim;
}

}  // namespace metaload
