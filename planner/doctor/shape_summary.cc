#include "planner/doctor/shape_summary.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace metaload {
namespace {

// Sizes named by where they show, for the likely cause: a config key is named only when a tensor
// whose dimension that key sets (in every transformers decoder) is among the mismatches.
struct KnownDim {
  absl::string_view name_suffix;
  size_t dim;
  absl::string_view config_key;
};
constexpr KnownDim kKnownDims[] = {
    {"embed_tokens.weight", 0, "vocab_size"},
    {"embed_tokens.weight", 1, "hidden_size"},
    {"lm_head.weight", 0, "vocab_size"},
    {"lm_head.weight", 1, "hidden_size"},
    {"norm.weight", 0, "hidden_size"},
    {"mlp.up_proj.weight", 0, "intermediate_size"},
    {"mlp.gate_proj.weight", 0, "intermediate_size"},
    {"mlp.down_proj.weight", 1, "intermediate_size"},
};

using SizePair = std::pair<int64_t, int64_t>;  // (skeleton, checkpoint)

}  // namespace

std::optional<std::string> ShapeMismatchSummary(const std::vector<TensorMismatch>& mismatches) {
  if (mismatches.size() < 2) return std::nullopt;
  // Per differing size pair: the tensors it shows in, and the config key a known tensor names.
  std::map<SizePair, std::set<std::string>> tensors_of;
  std::map<SizePair, absl::string_view> key_of;
  size_t other_rank = 0;  // tensors whose number of dimensions differs
  for (const TensorMismatch& m : mismatches) {
    if (m.skeleton_shape.size() != m.checkpoint_shape.size()) {
      ++other_rank;
      continue;
    }
    for (size_t d = 0; d < m.skeleton_shape.size(); ++d) {
      if (m.skeleton_shape[d] == m.checkpoint_shape[d]) continue;
      const SizePair pair{m.skeleton_shape[d], m.checkpoint_shape[d]};
      tensors_of[pair].insert(m.name);
      for (const KnownDim& known : kKnownDims) {
        if (known.dim == d && absl::EndsWith(m.name, known.name_suffix))
          key_of.try_emplace(pair, known.config_key);
      }
    }
  }
  std::vector<std::pair<SizePair, size_t>> pairs;
  for (const auto& [pair, names] : tensors_of) pairs.emplace_back(pair, names.size());
  std::stable_sort(pairs.begin(), pairs.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  constexpr size_t kPairsShown = 3;
  std::vector<std::string> sizes, keys;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto& [pair, count] = pairs[i];
    if (i < kPairsShown) {
      sizes.push_back(i == 0 ? absl::StrCat(pair.first, " in the skeleton is ", pair.second,
                                            " in the checkpoint (in ", count, ")")
                             : absl::StrCat(pair.first, " is ", pair.second, " (in ", count, ")"));
    }
    if (auto key = key_of.find(pair); key != key_of.end()) {
      const std::string named =
          absl::StrCat(key->second, " ", pair.first, " vs the checkpoint's ", pair.second);
      if (std::find(keys.begin(), keys.end(), named) == keys.end()) keys.push_back(named);
    }
  }
  if (pairs.size() > kPairsShown) sizes.push_back(absl::StrCat(pairs.size() - kPairsShown, " more sizes"));
  if (other_rank > 0) sizes.push_back(absl::StrCat(other_rank, " with another number of dimensions"));
  return absl::StrCat(
      mismatches.size(), " tensors differ in shape: ", absl::StrJoin(sizes, ", "),
      keys.empty() ? ": another variant or size of this model?"
                   : absl::StrCat(": another variant of this model, ", absl::StrJoin(keys, ", "), "?"));
}

}  // namespace metaload
