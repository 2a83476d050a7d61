// How the `tp` strategy cuts one tensor across a tensor-parallel group: along the dimension
// planner/strategy/strategies/tp_rules.h names, into pieces cut as torch.chunk and DTensor's Shard(dim) cut
// them (ChunkSlice, planner/plan/slice.h: ceil(extent / parts) each, the last shorter, any past the end
// empty), and on attention-head boundaries, so that every rank holds whole heads, the way
// Megatron-LM and vLLM shard attention. Internal to planner/; pure.
//
//   // Qwen2.5-3B (16 heads, 2 key/value heads of 128) at --tp 8:
//   ML_ASSIGN_OR_RETURN(TensorSplit split, TpSplitFor(skeleton, "model.layers.0.self_attn.k_proj.weight",
//                                                     {256, 2048}, 8));
//   // split.dim 0, split.parts 2: ranks 0-3 hold rows [0, 128) (head 0), ranks 4-7 [128, 256)
//
// Dims without heads (vocabularies, MLPs) split unevenly when they must: a vocabulary of 32002 at
// --tp 4 gives 8001, 8001, 8001 and 7999 rows, one of 3 rows at --tp 4 gives 1, 1, 1 and none.
// Heads (AttentionGeometry: H heads, K key/value heads, D each) never do:
//   query heads (q_proj, o_proj, ...): H % tp == 0, tp pieces.
//   key/value heads (k_proj, v_proj): K % tp == 0, tp pieces; else tp % K == 0, K pieces, each
//     replicated on tp / K ranks (the whole tensor on every rank when K == 1); else refused.
//   Falcon's query_key_value: K % tp == 0, tp pieces of whole groups; else refused.
//   concatenated parts ([q; k; v], [gate; up]): refused, whatever tp.
// A skeleton without "attention" cannot say where heads end: splitting a head-structured tensor
// is refused. A skeleton's own tp_rules override all of this (the user vouches for them).
#ifndef METALOAD_PLANNER_STRATEGY_STRATEGIES_TP_SPLIT_H_
#define METALOAD_PLANNER_STRATEGY_STRATEGIES_TP_SPLIT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/skeleton/skeleton.h"
#include "planner/strategy/strategies/tp_rules.h"

namespace metaload {

struct TensorSplit {
  int dim = kTpReplicate;  // kTpReplicate: every rank of the group holds the tensor whole
  int64_t parts = 1;       // ChunkSlice pieces along `dim` (equal when heads are split); divides tp

  // The piece rank `group_rank` (in [0, tp)) of a group of `tp` holds.
  int64_t PieceOf(int64_t group_rank, int64_t tp) const { return group_rank / (tp / parts); }
};

// The split of the tensor `tensor_name` of `shape` at `tp` ranks per group. InvalidArgument,
// naming the tensor and its shape, when no split that keeps heads whole exists (see above), or
// when a head-structured dimension disagrees with the skeleton's "attention".
// REQUIRES: tp >= 1.
absl::StatusOr<TensorSplit> TpSplitFor(const Skeleton& skeleton, absl::string_view tensor_name,
                                       const std::vector<int64_t>& shape, int64_t tp);

}  // namespace metaload

#endif  // METALOAD_PLANNER_STRATEGY_STRATEGIES_TP_SPLIT_H_
