// FalconForCausalLM, and the configs of its ancestors RefinedWebModel (Falcon-7B: multi-query)
// and RefinedWeb (Falcon-40B: grouped KV heads, the "new decoder architecture"), which name
// their keys n_head, n_layer, n_head_kv, n_embed. Mirrors transformers' modeling_falcon.py and
// its convert_custom_code_checkpoint.py (how those old keys map onto FalconConfig).
#include <string>

#include "absl/strings/str_cat.h"
#include "planner/skeleton/hf/architectures/architecture_table.h"
#include "planner/skeleton/hf/hf_arch.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

struct FalconDims {
  int64_t vocab, hidden, layers, heads, kv_heads, head_dim, ffn;
  bool new_decoder, multi_query, parallel_attn, bias;
  int64_t norms_in_parallel_attn;  // 2: ln_attn + ln_mlp; otherwise input_layernorm alone
};

absl::StatusOr<FalconDims> ReadFalconDims(const HfConfigReader& config) {
  FalconDims d;
  ML_ASSIGN_OR_RETURN(d.vocab, config.Dim({"vocab_size"}));
  ML_ASSIGN_OR_RETURN(d.hidden, config.Dim({"hidden_size", "n_embed"}));
  ML_ASSIGN_OR_RETURN(d.layers, config.Count({"num_hidden_layers", "n_layer"}, kMaxHfLayers));
  ML_ASSIGN_OR_RETURN(d.heads, config.Dim({"num_attention_heads", "n_head"}));
  ML_ASSIGN_OR_RETURN(
      d.head_dim, DivideEvenly(config, d.hidden, config.Has("n_embed") ? "n_embed" : "hidden_size", d.heads,
                               config.Has("n_head") ? "n_head" : "num_attention_heads"));
  ML_ASSIGN_OR_RETURN(d.kv_heads, config.DimOr({"num_kv_heads", "n_head_kv"}, d.heads));
  // RefinedWeb configs have no new_decoder_architecture key: n_head_kv (Falcon-40B) implies it.
  ML_ASSIGN_OR_RETURN(const std::string model_type, config.TopLevelStringOr("model_type", ""));
  ML_ASSIGN_OR_RETURN(d.new_decoder, config.BoolOr("new_decoder_architecture",
                                                   config.Has("n_head_kv") || model_type == "RefinedWeb"));
  ML_ASSIGN_OR_RETURN(d.multi_query, config.BoolOr("multi_query", true));
  ML_ASSIGN_OR_RETURN(d.parallel_attn, config.BoolOr("parallel_attn", true));
  ML_ASSIGN_OR_RETURN(d.bias, config.BoolOr("bias", false));
  ML_ASSIGN_OR_RETURN(d.norms_in_parallel_attn,
                      config.CountOr({"num_ln_in_parallel_attn"}, d.new_decoder ? 2 : 1, kMaxHfDim));
  ML_ASSIGN_OR_RETURN(d.ffn, config.DimOr({"ffn_hidden_size"}, 4 * d.hidden));
  if (d.new_decoder) {
    ML_RETURN_IF_ERROR(DivideEvenly(config, d.heads, config.Has("n_head") ? "n_head" : "num_attention_heads",
                                    d.kv_heads, config.Has("n_head_kv") ? "n_head_kv" : "num_kv_heads")
                           .status());
  } else {
    // FalconAttention ignores num_kv_heads here: one shared key/value head (multi-query), or
    // one per query head.
    d.kv_heads = d.multi_query ? 1 : d.heads;
  }
  return d;
}

// FalconAttention's fused query_key_value output size. All three layouts are kv_heads groups,
// each of its query heads then its key and value head ([K x (H/K + 2) x D], see _split_heads):
// grouped with the new decoder, [H q; k; v] for multi-query (K = 1), [q, k, v] per head
// otherwise (K = H). A tensor-parallel split must keep groups whole.
int64_t FusedQkvOut(const FalconDims& d) { return (2 * d.kv_heads + d.heads) * d.head_dim; }

absl::StatusOr<Skeleton> BuildFalcon(const HfConfigReader& config, absl::string_view architecture) {
  ML_ASSIGN_OR_RETURN(const FalconDims d, ReadFalconDims(config));
  ML_RETURN_IF_ERROR(CheckTensorCount(config, d.layers, 16));
  ML_ASSIGN_OR_RETURN(const bool tied, config.BoolOr("tie_word_embeddings", true));
  ML_ASSIGN_OR_RETURN(const DType dtype, config.ParamDType());
  // transformers >= 5 builds the rotary embedding even for ALiBi models (alibi: true), which
  // then leave it unused; the buffers exist either way.
  ML_ASSIGN_OR_RETURN(const RopeBuffer rope, RopeInvFreq(config, d.head_dim, RopeOptions{}));

  Skeleton skeleton;
  skeleton.attention = AttentionGeometry{d.heads, d.kv_heads, d.head_dim};
  SkeletonBuilder b(&skeleton, dtype);
  b.Param("transformer.word_embeddings.weight", {d.vocab, d.hidden});
  for (int64_t i = 0; i < d.layers; ++i) {
    const std::string layer = absl::StrCat("transformer.h.", i);
    b.Layer(layer, "FalconDecoderLayer");
    b.Linear(layer + ".self_attention.query_key_value", d.hidden, FusedQkvOut(d), d.bias);
    b.Linear(layer + ".self_attention.dense", d.hidden, d.hidden, d.bias);
    b.Linear(layer + ".mlp.dense_h_to_4h", d.hidden, d.ffn, d.bias);
    b.Linear(layer + ".mlp.dense_4h_to_h", d.ffn, d.hidden, d.bias);
    // FalconDecoderLayer's __init__ order: sequential attention assigns post_attention_layernorm
    // first; parallel attention has one norm, or one per branch.
    if (!d.parallel_attn) {
      b.Norm(layer + ".post_attention_layernorm", d.hidden, true);
      b.Norm(layer + ".input_layernorm", d.hidden, true);
    } else if (d.norms_in_parallel_attn == 2) {
      b.Norm(layer + ".ln_attn", d.hidden, true);
      b.Norm(layer + ".ln_mlp", d.hidden, true);
    } else {
      b.Norm(layer + ".input_layernorm", d.hidden, true);
    }
  }
  b.Norm("transformer.ln_f", d.hidden, true);
  b.RotaryBuffers("transformer.rotary_emb", rope);
  b.LmHead(tied, "transformer.word_embeddings.weight", d.vocab, d.hidden);
  return skeleton;
}

// Falcon's ancestors from the trust_remote_code era (Falcon-7B's RefinedWebModel, Falcon-40B's
// RefinedWeb) load as FalconForCausalLM in transformers.
constexpr HfClass kClasses[] = {{"FalconForCausalLM", "falcon"},
                                {"RWForCausalLM", "RefinedWeb", "FalconForCausalLM"},
                                {"RWForCausalLM", "RefinedWebModel", "FalconForCausalLM"}};

// self_attention.dense is the attention's output (its MLP's are dense_h_to_4h and dense_4h_to_h).
constexpr ModuleTpRule kTpRules[] = {
    {"query_key_value", TpParallel::kColumn, TpHeads::kFalconGroups},
    {"dense", TpParallel::kRow, TpHeads::kQuery, "", "self_attention"},
    {"dense", TpParallel::kRow},
    {"dense_h_to_4h", TpParallel::kColumn},
    {"dense_4h_to_h", TpParallel::kRow},
    {"word_embeddings", TpParallel::kVocab},
    {"lm_head", TpParallel::kVocab},
};

}  // namespace

const Architecture kFalconArchitecture(kClasses, &BuildFalcon, kTpRules);

}  // namespace metaload
