// Which dimension of a tensor the `tp` strategy splits across a tensor-parallel group, by
// name: a skeleton's own rules, else the built-in column/row rules of Megatron and
// transformers' base_model_tp_plan that each architecture's record holds
// (planner/skeleton/hf/architecture_registry.h: ModuleTpRule, TpHeads). Pure.
//
//   int dim = BuiltInTpSplitDim("model.layers.0.self_attn.q_proj.weight", 2);  // 0: column-parallel
//
// The built-in rules (planner/skeleton/hf/architectures/*.cc; see docs/skeleton-format.md):
//   column-parallel (weight dim 0, bias dim 0): q_proj k_proj v_proj gate_proj up_proj qkv_proj
//     gate_up_proj query_key_value dense_h_to_4h, Mixtral experts w1 w3; GPT-2's Conv1D c_attn
//     c_fc store the weight transposed, so their weight splits on dim 1.
//   row-parallel (weight dim 1, bias replicated): o_proj down_proj dense dense_4h_to_h, Mixtral
//     experts w2; GPT-2's c_proj weight splits on dim 0.
//   vocab-parallel (dim 0): embed_tokens wte word_embeddings lm_head.
//   everything else (norms, routers, position embeddings, buffers): replicated.
// MoE experts are split inside each expert rather than across the group (expert parallel),
// so every expert runs on every TP rank and the rule does not depend on the expert count.
// Attention projections split only on head boundaries (TpHeads; planner/strategy/strategies/tp_split.h cuts
// them).
#ifndef METALOAD_PLANNER_STRATEGY_STRATEGIES_TP_RULES_H_
#define METALOAD_PLANNER_STRATEGY_STRATEGIES_TP_RULES_H_

#include <cstddef>
#include <vector>

#include "absl/strings/string_view.h"
#include "planner/skeleton/hf/architecture_registry.h"
#include "planner/skeleton/skeleton.h"

namespace metaload {

inline constexpr int kTpReplicate = -1;

struct TpSplitRule {
  int dim = kTpReplicate;
  TpHeads heads = TpHeads::kNone;
  // kConcatenated: the parts, for messages ("[q; k; v]").
  absl::string_view parts;
};

// The dimension to split, or kTpReplicate. `dims` is the tensor's number of dimensions: a
// rule whose dimension the tensor lacks replicates.
int BuiltInTpSplitDim(absl::string_view tensor_name, size_t dims);

// BuiltInTpSplitDim with what the dimension holds.
TpSplitRule BuiltInTpSplit(absl::string_view tensor_name, size_t dims);

// The skeleton's own rules first (the first whose pattern matches wins, heads kNone: the user
// vouches for it), else the built-in ones. A rule naming a dimension the tensor lacks replicates.
TpSplitRule TpSplitOf(const std::vector<TpRule>& rules, absl::string_view tensor_name, size_t dims);
// TpSplitOf's dimension.
int TpSplitDim(const std::vector<TpRule>& rules, absl::string_view tensor_name, size_t dims);

// `*` matches any run of characters (dots included); every other character itself.
bool GlobMatches(absl::string_view pattern, absl::string_view name);

}  // namespace metaload

#endif  // METALOAD_PLANNER_STRATEGY_STRATEGIES_TP_RULES_H_
