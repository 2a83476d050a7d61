// GPT2LMHeadModel, after transformers' modeling_gpt2.py. Two things differ from the other
// families: GPT-2's linear layers are Conv1D modules whose weights are stored transposed
// ([in, out]), and older transformers kept per-layer attention buffers:
//   attn.bias (the causal mask, [1, 1, n_positions, n_positions]) and attn.masked_bias (a
//   scalar) were persistent in early 4.x releases -- old checkpoints hold them -- then
//   non-persistent (a 4.47 save_pretrained writes neither), and transformers 5 dropped both.
// The skeleton follows the pinned transformers: neither buffer exists. A checkpoint that still
// holds them carries extras transformers ignores on load (_keys_to_ignore_on_load_unexpected).
#include <string>

#include "absl/strings/str_cat.h"
#include "planner/skeleton/hf/architectures/architecture_table.h"
#include "planner/skeleton/hf/hf_arch.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

void AddAttention(SkeletonBuilder& b, const std::string& attn, int64_t embed, bool cross) {
  if (cross) {
    b.Conv1D(attn + ".c_attn", embed, 2 * embed);  // keys and values from the encoder
    b.Conv1D(attn + ".q_attn", embed, embed);
  } else {
    b.Conv1D(attn + ".c_attn", embed, 3 * embed);  // fused q, k, v
  }
  b.Conv1D(attn + ".c_proj", embed, embed);
}

absl::StatusOr<Skeleton> BuildGpt2(const HfConfigReader& config, absl::string_view architecture) {
  ML_ASSIGN_OR_RETURN(const int64_t vocab, config.Dim({"vocab_size"}));
  ML_ASSIGN_OR_RETURN(const int64_t embed, config.Dim({"n_embd", "hidden_size"}));
  ML_ASSIGN_OR_RETURN(const int64_t layers, config.Count({"n_layer", "num_hidden_layers"}, kMaxHfLayers));
  ML_ASSIGN_OR_RETURN(const int64_t heads, config.Dim({"n_head", "num_attention_heads"}));
  ML_ASSIGN_OR_RETURN(const int64_t head_dim,
                      DivideEvenly(config, embed, config.Has("n_embd") ? "n_embd" : "hidden_size", heads,
                                   config.Has("n_head") ? "n_head" : "num_attention_heads"));
  ML_ASSIGN_OR_RETURN(const int64_t positions,
                      config.DimOr({"n_positions", "max_position_embeddings"}, 1024));
  ML_ASSIGN_OR_RETURN(const int64_t inner, config.DimOr({"n_inner"}, 4 * embed));
  ML_ASSIGN_OR_RETURN(const bool cross_attention, config.BoolOr("add_cross_attention", false));
  ML_RETURN_IF_ERROR(CheckTensorCount(config, layers, 26));
  ML_ASSIGN_OR_RETURN(const bool tied, config.BoolOr("tie_word_embeddings", true));
  ML_ASSIGN_OR_RETURN(const DType dtype, config.ParamDType());

  Skeleton skeleton;
  skeleton.attention = AttentionGeometry{heads, heads, head_dim};  // no grouped-query attention
  SkeletonBuilder b(&skeleton, dtype);
  b.Param("transformer.wte.weight", {vocab, embed});
  b.Param("transformer.wpe.weight", {positions, embed});
  for (int64_t i = 0; i < layers; ++i) {
    const std::string layer = absl::StrCat("transformer.h.", i);
    b.Layer(layer, "GPT2Block");
    b.Norm(layer + ".ln_1", embed, true);
    AddAttention(b, layer + ".attn", embed, /*cross=*/false);
    b.Norm(layer + ".ln_2", embed, true);
    if (cross_attention) {
      AddAttention(b, layer + ".crossattention", embed, /*cross=*/true);
      b.Norm(layer + ".ln_cross_attn", embed, true);
    }
    b.Conv1D(layer + ".mlp.c_fc", embed, inner);
    b.Conv1D(layer + ".mlp.c_proj", inner, embed);
  }
  b.Norm("transformer.ln_f", embed, true);
  b.LmHead(tied, "transformer.wte.weight", vocab, embed);
  return skeleton;
}

constexpr HfClass kClasses[] = {{"GPT2LMHeadModel", "gpt2"}};

// Conv1D modules: weights stored [in, out], the transpose of nn.Linear's.
constexpr ModuleTpRule kTpRules[] = {
    {"c_attn", TpParallel::kColumn, TpHeads::kConcatenated, "[k; v]", "crossattention", true},
    {"c_attn", TpParallel::kColumn, TpHeads::kConcatenated, "[q; k; v]", "", true},
    {"c_fc", TpParallel::kColumn, TpHeads::kNone, "", "", true},
    {"c_proj", TpParallel::kRow, TpHeads::kQuery, "", "attn", true},
    {"c_proj", TpParallel::kRow, TpHeads::kQuery, "", "crossattention", true},
    {"c_proj", TpParallel::kRow, TpHeads::kNone, "", "", true},  // the MLP's
    {"wte", TpParallel::kVocab},
    {"lm_head", TpParallel::kVocab},
};

}  // namespace

const Architecture kGpt2Architecture(kClasses, &BuildGpt2, kTpRules);

}  // namespace metaload
