// Head-aligned tensor-parallel splits (planner/strategy/strategies/tp_split.h).
#include "planner/strategy/strategies/tp_split.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "planner/format/tensor_layout.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

std::string Plural(int64_t count, absl::string_view noun, absl::string_view plural) {
  return absl::StrCat(count, " ", count == 1 ? noun : plural);
}

absl::string_view DoNot(int64_t count) { return count == 1 ? "does not" : "do not"; }

// "*.qkv_proj.*": the module's tensors in every layer, for the tp_rules fix a refusal offers.
std::string ModulePattern(absl::string_view tensor_name) {
  absl::string_view parent = tensor_name.substr(0, tensor_name.rfind('.'));
  const size_t dot = parent.rfind('.');
  return absl::StrCat("*.", dot == absl::string_view::npos ? parent : parent.substr(dot + 1), ".*");
}

std::string ReplicateFix(absl::string_view tensor_name) {
  return absl::StrCat("if your runtime replicates it, add {\"pattern\": \"", ModulePattern(tensor_name),
                      "\", \"split\": \"replicate\"} to \"tp_rules\" in model.json");
}

// What a head-structured dimension must hold by the skeleton's attention geometry, and why.
// Fields are at most 2^24 (skeleton.h): no product overflows.
absl::Status CheckHeadDimension(const std::string& tensor, int dim, int64_t extent, TpHeads heads,
                                const AttentionGeometry& a) {
  int64_t expected = 0;
  std::string expected_why;
  switch (heads) {
    case TpHeads::kQuery:
      expected = a.heads * a.head_dim;
      expected_why = absl::StrCat(a.heads, " heads x ", a.head_dim);
      break;
    case TpHeads::kKeyValue:
      expected = a.kv_heads * a.head_dim;
      expected_why = absl::StrCat(a.kv_heads, " key/value heads x ", a.head_dim);
      break;
    case TpHeads::kFalconGroups:
      expected = (a.heads + 2 * a.kv_heads) * a.head_dim;
      expected_why =
          absl::StrCat("(", a.heads, " heads + 2 x ", a.kv_heads, " key/value heads) x ", a.head_dim);
      break;
    case TpHeads::kNone:
    case TpHeads::kConcatenated:
      return absl::OkStatus();
  }
  if (extent == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(tensor, "dim ", dim, " (", extent,
                                                 ") is not what \"attention\" says it holds: ", expected_why,
                                                 " = ", expected));
}

// The split that keeps every head whole on its ranks (tp_split.h), or why there is none.
absl::StatusOr<TensorSplit> SplitOnHeads(const std::string& tensor, absl::string_view tensor_name, int dim,
                                         TpHeads heads, const AttentionGeometry& a, int64_t tp) {
  switch (heads) {
    case TpHeads::kQuery:
      if (a.heads % tp != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            tensor, "its ", Plural(a.heads, "attention head", "attention heads"), " ", DoNot(a.heads),
            " divide by --tp ", tp, " (each rank of a tensor-parallel group holds whole heads)"));
      }
      return TensorSplit{dim, tp};
    case TpHeads::kKeyValue:
      if (a.kv_heads % tp == 0) return TensorSplit{dim, tp};
      // Fewer key/value heads than ranks: each is replicated on the tp / K ranks whose query
      // heads use it, as Megatron-LM and vLLM do.
      if (tp % a.kv_heads == 0) return a.kv_heads == 1 ? TensorSplit{} : TensorSplit{dim, a.kv_heads};
      return absl::InvalidArgumentError(absl::StrCat(
          tensor, "its ", Plural(a.kv_heads, "key/value head", "key/value heads"), " (for ",
          Plural(a.heads, "attention head", "attention heads"), ") do not divide by --tp ", tp, ", nor --tp ",
          tp, " by them (each rank holds whole key/value heads, or one replicated on --tp / ", a.kv_heads,
          " ranks)"));
    case TpHeads::kFalconGroups:
      if (a.kv_heads % tp == 0) return TensorSplit{dim, tp};
      return absl::InvalidArgumentError(absl::StrCat(
          tensor, "its ", Plural(a.kv_heads, "group", "groups"), " (each ",
          Plural(a.heads / a.kv_heads, "query head", "query heads"), " then its key and value head) ",
          DoNot(a.kv_heads), " divide by --tp ", tp,
          ", and a contiguous slice per rank must hold whole groups; ", ReplicateFix(tensor_name)));
    case TpHeads::kNone:
    case TpHeads::kConcatenated:
      break;
  }
  return absl::InternalError(absl::StrCat(tensor, "unhandled tensor-parallel layout"));
}

}  // namespace

absl::StatusOr<TensorSplit> TpSplitFor(const Skeleton& skeleton, absl::string_view tensor_name,
                                       const std::vector<int64_t>& shape, int64_t tp) {
  if (tp <= 1) return TensorSplit{};
  const TpSplitRule rule = TpSplitOf(skeleton.tp_rules, tensor_name, shape.size());
  // An empty dimension has nothing to split: every rank of the group holds its no bytes.
  if (rule.dim == kTpReplicate || shape[rule.dim] == 0) return TensorSplit{};
  const int dim = rule.dim;
  const int64_t extent = shape[dim];
  const std::string tensor = absl::StrCat("tensor ", tensor_name, " ", ShapeToString(shape), ": ");
  // No heads to keep whole: torch.chunk's pieces, uneven when the dim does not divide, as DTensor
  // holds a vocabulary of 32002 at tp 4.
  if (rule.heads == TpHeads::kNone) return TensorSplit{dim, tp};
  if (rule.heads == TpHeads::kConcatenated) {
    return absl::InvalidArgumentError(
        absl::StrCat(tensor, "dim ", dim, " concatenates ", rule.parts,
                     ", and one contiguous slice per rank cannot hold matching pieces of each part, so --tp ",
                     tp, " cannot split it; ", ReplicateFix(tensor_name)));
  }
  if (!skeleton.attention.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        tensor, "--tp ", tp,
        " would split its attention heads, but the skeleton does not say how many there are (a "
        "skeleton derived from a checkpoint does not); build the skeleton from the model's config.json "
        "(metactl skeleton config.json) or add \"attention\": {\"heads\": H, \"kv_heads\": K, "
        "\"head_dim\": D} to model.json"));
  }
  ML_RETURN_IF_ERROR(CheckHeadDimension(tensor, dim, extent, rule.heads, *skeleton.attention));
  return SplitOnHeads(tensor, tensor_name, dim, rule.heads, *skeleton.attention, tp);
}

}  // namespace metaload
