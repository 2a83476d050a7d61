// Built-in tensor-parallel rules by tensor-name suffix.
#include "planner/strategy/strategies/tp_rules.h"

#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace metaload {
namespace {

enum class Kind { kReplicate, kColumn, kRow, kVocab };

constexpr absl::string_view kColumn[] = {
    "q_proj",          "k_proj",        "v_proj", "gate_proj", "up_proj", "qkv_proj", "gate_up_proj",
    "query_key_value", "dense_h_to_4h", "c_attn", "c_fc",      "w1",      "w3"};
constexpr absl::string_view kRow[] = {"o_proj", "down_proj", "dense", "dense_4h_to_h", "c_proj", "w2"};
constexpr absl::string_view kVocab[] = {"embed_tokens", "wte", "word_embeddings", "lm_head"};

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

// What `module`'s split dimension holds (planner/skeleton/hf/architectures/*.cc build these modules).
TpSplitRule HeadsOf(absl::string_view parent, absl::string_view module) {
  const absl::string_view owner = OwnerName(parent);
  if (module == "q_proj" || module == "o_proj") return {0, TpHeads::kQuery, ""};
  if (module == "k_proj" || module == "v_proj") return {0, TpHeads::kKeyValue, ""};
  if (module == "query_key_value") return {0, TpHeads::kFalconGroups, ""};
  // Falcon's attention output; its MLP's are dense_h_to_4h and dense_4h_to_h.
  if (module == "dense" && owner == "self_attention") return {0, TpHeads::kQuery, ""};
  if (module == "c_proj" && (owner == "attn" || owner == "crossattention")) return {0, TpHeads::kQuery, ""};
  if (module == "qkv_proj") return {0, TpHeads::kConcatenated, "[q; k; v]"};
  if (module == "c_attn")
    return {0, TpHeads::kConcatenated, owner == "crossattention" ? "[k; v]" : "[q; k; v]"};
  if (module == "gate_up_proj") return {0, TpHeads::kConcatenated, "[gate; up]"};
  return {};
}

template <size_t N>
bool OneOf(absl::string_view name, const absl::string_view (&names)[N]) {
  for (absl::string_view candidate : names) {
    if (name == candidate) return true;
  }
  return false;
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
  const absl::string_view module = ModuleName(parent);
  // GPT-2's Conv1D weights are [in, out]: the transpose of nn.Linear's.
  const bool conv1d = module == "c_attn" || module == "c_fc" || module == "c_proj";
  int dim = kTpReplicate;
  if (OneOf(module, kColumn)) {
    dim = is_bias ? 0 : (conv1d ? 1 : 0);
  } else if (OneOf(module, kRow)) {
    dim = is_bias ? kTpReplicate : (conv1d ? 0 : 1);
  } else if (OneOf(module, kVocab) && !is_bias) {
    dim = 0;
  }
  if (dim == kTpReplicate || static_cast<size_t>(dim) >= dims) return {};
  TpSplitRule split = HeadsOf(parent, module);
  split.dim = dim;
  return split;
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
