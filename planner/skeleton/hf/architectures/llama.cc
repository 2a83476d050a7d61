// The Llama family: decoder-only models whose checkpoints share Llama's layout
// (model.embed_tokens, model.layers.N.{self_attn,mlp,input_layernorm,post_attention_layernorm},
// model.norm, lm_head) and differ only in the details a table can say. Each row mirrors the
// transformers modeling_<arch>.py and configuration_<arch>.py of the pinned version
// (scripts/requirements.txt); tests/integration/cli/test_hf_skeletons.py holds us to them.
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "planner/skeleton/hf/architectures/architecture_table.h"
#include "planner/skeleton/hf/hf_arch.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

enum class AttentionBias {
  kNone,               // Mistral, Mixtral, Phi3
  kQkv,                // Qwen2: q/k/v always carry a bias, o_proj never
  kFromAttentionBias,  // Llama, Gemma: all four follow "attention_bias" (default false)
};

enum class Mlp {
  kGateUpDown,   // gate_proj, up_proj, down_proj
  kFusedGateUp,  // Phi3: gate_up_proj [2 * intermediate, hidden], down_proj
  kMoe,          // Mixtral: block_sparse_moe.gate + experts.N.{w1,w2,w3}
};

struct DecoderSpec {
  absl::string_view architecture;
  absl::string_view layer_type;
  bool tie_default;          // the config class's tie_word_embeddings default
  int64_t head_dim_default;  // 0: hidden_size / num_attention_heads
  int64_t kv_heads_default;  // 0: num_attention_heads (used only when the key is absent)
  AttentionBias attention_bias;
  bool mlp_bias_key;  // Llama's "mlp_bias" puts a bias on gate/up/down
  bool fused_qkv;     // Phi3's qkv_proj [(heads + 2 * kv_heads) * head_dim, hidden]
  Mlp mlp;
  bool embed_scale;  // Gemma scales embeddings by sqrt(hidden_size), kept as a buffer
  double rope_theta_default;
  bool phi3_rope;
};

constexpr DecoderSpec kSpecs[] = {
    {"LlamaForCausalLM", "LlamaDecoderLayer", false, 0, 0, AttentionBias::kFromAttentionBias, true, false,
     Mlp::kGateUpDown, false, 10000.0, false},
    {"MistralForCausalLM", "MistralDecoderLayer", false, 0, 8, AttentionBias::kNone, false, false,
     Mlp::kGateUpDown, false, 10000.0, false},
    {"MixtralForCausalLM", "MixtralDecoderLayer", false, 0, 8, AttentionBias::kNone, false, false, Mlp::kMoe,
     false, 1000000.0, false},
    {"Qwen2ForCausalLM", "Qwen2DecoderLayer", false, 0, 32, AttentionBias::kQkv, false, false,
     Mlp::kGateUpDown, false, 10000.0, false},
    {"GemmaForCausalLM", "GemmaDecoderLayer", true, 256, 16, AttentionBias::kFromAttentionBias, false, false,
     Mlp::kGateUpDown, true, 10000.0, false},
    {"Phi3ForCausalLM", "Phi3DecoderLayer", false, 0, 0, AttentionBias::kNone, false, true, Mlp::kFusedGateUp,
     false, 10000.0, true},
};

struct Dims {
  int64_t vocab, hidden, layers, heads, kv_heads, head_dim, intermediate, experts = 0;
  bool attention_bias = false, mlp_bias = false;
};

absl::StatusOr<Dims> ReadDims(const HfConfigReader& config, const DecoderSpec& spec) {
  Dims d;
  ML_ASSIGN_OR_RETURN(d.vocab, config.Dim({"vocab_size"}));
  ML_ASSIGN_OR_RETURN(d.hidden, config.Dim({"hidden_size"}));
  ML_ASSIGN_OR_RETURN(d.layers, config.Count({"num_hidden_layers"}, kMaxHfLayers));
  ML_ASSIGN_OR_RETURN(d.heads, config.Dim({"num_attention_heads"}));
  ML_ASSIGN_OR_RETURN(d.kv_heads, config.DimOr({"num_key_value_heads"}, spec.kv_heads_default));
  if (d.kv_heads == 0) d.kv_heads = d.heads;
  if (config.Has("head_dim")) {
    ML_ASSIGN_OR_RETURN(d.head_dim, config.Dim({"head_dim"}));
  } else if (spec.head_dim_default != 0) {
    d.head_dim = spec.head_dim_default;
  } else {
    ML_ASSIGN_OR_RETURN(d.head_dim,
                        DivideEvenly(config, d.hidden, "hidden_size", d.heads, "num_attention_heads"));
  }
  // transformers' num_key_value_groups = heads // kv_heads would silently drop heads.
  ML_RETURN_IF_ERROR(
      DivideEvenly(config, d.heads, "num_attention_heads", d.kv_heads, "num_key_value_heads").status());
  ML_ASSIGN_OR_RETURN(d.intermediate, config.Dim({"intermediate_size"}));
  if (spec.mlp == Mlp::kMoe) {
    ML_ASSIGN_OR_RETURN(d.experts, config.DimOr({"num_local_experts", "num_experts"}, 8));
  }
  if (spec.attention_bias == AttentionBias::kFromAttentionBias) {
    ML_ASSIGN_OR_RETURN(d.attention_bias, config.BoolOr("attention_bias", false));
  }
  if (spec.mlp_bias_key) {
    ML_ASSIGN_OR_RETURN(d.mlp_bias, config.BoolOr("mlp_bias", false));
  }
  return d;
}

void AddAttention(SkeletonBuilder& b, const std::string& attn, const DecoderSpec& spec, const Dims& d) {
  const int64_t q_out = d.heads * d.head_dim;
  const int64_t kv_out = d.kv_heads * d.head_dim;
  if (spec.fused_qkv) {
    // Phi3Attention assigns o_proj before qkv_proj.
    b.Linear(attn + ".o_proj", q_out, d.hidden, false);
    b.Linear(attn + ".qkv_proj", d.hidden, q_out + 2 * kv_out, false);
    return;
  }
  const bool qkv_bias = spec.attention_bias == AttentionBias::kQkv || d.attention_bias;
  b.Linear(attn + ".q_proj", d.hidden, q_out, qkv_bias);
  b.Linear(attn + ".k_proj", d.hidden, kv_out, qkv_bias);
  b.Linear(attn + ".v_proj", d.hidden, kv_out, qkv_bias);
  b.Linear(attn + ".o_proj", q_out, d.hidden, d.attention_bias);
}

void AddMlp(SkeletonBuilder& b, const std::string& layer, const DecoderSpec& spec, const Dims& d) {
  switch (spec.mlp) {
    case Mlp::kGateUpDown:
      b.Linear(layer + ".mlp.gate_proj", d.hidden, d.intermediate, d.mlp_bias);
      b.Linear(layer + ".mlp.up_proj", d.hidden, d.intermediate, d.mlp_bias);
      b.Linear(layer + ".mlp.down_proj", d.intermediate, d.hidden, d.mlp_bias);
      return;
    case Mlp::kFusedGateUp:
      b.Linear(layer + ".mlp.gate_up_proj", d.hidden, 2 * d.intermediate, false);
      b.Linear(layer + ".mlp.down_proj", d.intermediate, d.hidden, false);
      return;
    case Mlp::kMoe: {
      // transformers >= 5 fuses the experts in memory (mlp.experts.gate_up_proj) but reads and
      // writes checkpoints in this per-expert layout, which every Mixtral checkpoint has.
      const std::string moe = layer + ".block_sparse_moe";
      b.Linear(moe + ".gate", d.hidden, d.experts, false);
      for (int64_t e = 0; e < d.experts; ++e) {
        const std::string expert = absl::StrCat(moe, ".experts.", e);
        b.Linear(expert + ".w1", d.hidden, d.intermediate, false);
        b.Linear(expert + ".w2", d.intermediate, d.hidden, false);
        b.Linear(expert + ".w3", d.hidden, d.intermediate, false);
      }
      return;
    }
  }
}

absl::StatusOr<Skeleton> BuildLlamaFamily(const HfConfigReader& config, absl::string_view architecture) {
  const DecoderSpec* spec = nullptr;
  for (const DecoderSpec& row : kSpecs) {
    if (row.architecture == architecture) spec = &row;
  }
  if (spec == nullptr) return absl::InternalError(absl::StrCat("no Llama-family row for ", architecture));

  ML_ASSIGN_OR_RETURN(const Dims d, ReadDims(config, *spec));
  ML_RETURN_IF_ERROR(CheckTensorCount(config, d.layers, 16 + 3 * d.experts));
  ML_ASSIGN_OR_RETURN(const bool tied, config.BoolOr("tie_word_embeddings", spec->tie_default));
  ML_ASSIGN_OR_RETURN(const DType dtype, config.ParamDType());
  RopeOptions rope_options;
  rope_options.default_theta = spec->rope_theta_default;
  rope_options.phi3 = spec->phi3_rope;
  ML_ASSIGN_OR_RETURN(const RopeBuffer rope, RopeInvFreq(config, d.head_dim, rope_options));

  Skeleton skeleton;
  skeleton.attention = AttentionGeometry{d.heads, d.kv_heads, d.head_dim};
  SkeletonBuilder b(&skeleton, dtype);
  b.Param("model.embed_tokens.weight", {d.vocab, d.hidden});
  if (spec->embed_scale) {
    // torch.tensor(hidden_size ** 0.5) under the model's default dtype, so it takes that dtype.
    b.Buffer(
        "model.embed_tokens.embed_scale", {}, dtype,
        absl::StrCat("constant(value=", FormatRuleNumber(std::sqrt(static_cast<double>(d.hidden))), ")"));
  }
  for (int64_t i = 0; i < d.layers; ++i) {
    const std::string layer = absl::StrCat("model.layers.", i);
    b.Layer(layer, spec->layer_type);
    AddAttention(b, layer + ".self_attn", *spec, d);
    AddMlp(b, layer, *spec, d);
    b.Norm(layer + ".input_layernorm", d.hidden, false);
    b.Norm(layer + ".post_attention_layernorm", d.hidden, false);
  }
  b.Norm("model.norm", d.hidden, false);
  b.RotaryBuffers("model.rotary_emb", rope);
  b.LmHead(tied, "model.embed_tokens.weight", d.vocab, d.hidden);
  return skeleton;
}

constexpr HfClass kClasses[] = {{"LlamaForCausalLM", "llama"},     {"MistralForCausalLM", "mistral"},
                                {"MixtralForCausalLM", "mixtral"}, {"Qwen2ForCausalLM", "qwen2"},
                                {"GemmaForCausalLM", "gemma"},     {"Phi3ForCausalLM", "phi3"}};

// Megatron's and transformers' base_model_tp_plan. MoE experts split inside each expert rather
// than across the group (expert parallel), so every expert runs on every TP rank and the rule
// does not depend on the expert count.
constexpr ModuleTpRule kTpRules[] = {
    {"q_proj", TpParallel::kColumn, TpHeads::kQuery},
    {"k_proj", TpParallel::kColumn, TpHeads::kKeyValue},
    {"v_proj", TpParallel::kColumn, TpHeads::kKeyValue},
    {"o_proj", TpParallel::kRow, TpHeads::kQuery},
    {"qkv_proj", TpParallel::kColumn, TpHeads::kConcatenated, "[q; k; v]"},       // Phi3
    {"gate_up_proj", TpParallel::kColumn, TpHeads::kConcatenated, "[gate; up]"},  // Phi3
    {"gate_proj", TpParallel::kColumn},
    {"up_proj", TpParallel::kColumn},
    {"down_proj", TpParallel::kRow},
    {"w1", TpParallel::kColumn},  // Mixtral's experts: w1 and w3 are gate and up, w2 down
    {"w3", TpParallel::kColumn},
    {"w2", TpParallel::kRow},
    {"embed_tokens", TpParallel::kVocab},
    {"lm_head", TpParallel::kVocab},
};

}  // namespace

const Architecture kLlamaFamilyArchitecture(kClasses, &BuildLlamaFamily, kTpRules);

}  // namespace metaload
