// Built-in tensor-parallel rules by tensor-name suffix.
#include "planner/tp_rules.h"

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

template <size_t N>
bool OneOf(absl::string_view name, const absl::string_view (&names)[N]) {
  for (absl::string_view candidate : names) {
    if (name == candidate) return true;
  }
  return false;
}

}  // namespace

int BuiltInTpSplitDim(absl::string_view tensor_name, size_t dims) {
  absl::string_view parent = tensor_name;
  bool is_bias = false;
  if (absl::ConsumeSuffix(&parent, ".weight")) {
  } else if (absl::ConsumeSuffix(&parent, ".bias")) {
    is_bias = true;
  } else {
    return kTpReplicate;  // buffers and unusual parameters
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
  return dim != kTpReplicate && static_cast<size_t>(dim) < dims ? dim : kTpReplicate;
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

int TpSplitDim(const std::vector<TpRule>& rules, absl::string_view tensor_name, size_t dims) {
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
    return dim != kTpReplicate && static_cast<size_t>(dim) < dims ? dim : kTpReplicate;
  }
  return BuiltInTpSplitDim(tensor_name, dims);
}

}  // namespace metaload
