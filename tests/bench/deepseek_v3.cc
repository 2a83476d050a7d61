#include "tests/bench/deepseek_v3.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/bench/synthetic_checkpoint.h"

namespace metaload::bench {
namespace {

// deepseek-ai/DeepSeek-V3's config.json.
constexpr int64_t kLayers = 61;
constexpr int64_t kDenseLayers = 3;  // first_k_dense_replace
constexpr int64_t kHidden = 7168;
constexpr int64_t kHeads = 128;
constexpr int64_t kQLoraRank = 1536;
constexpr int64_t kKvLoraRank = 512;
constexpr int64_t kQkNopeHeadDim = 128;
constexpr int64_t kQkRopeHeadDim = 64;
constexpr int64_t kVHeadDim = 128;
constexpr int64_t kIntermediate = 18432;
constexpr int64_t kMoeIntermediate = 2048;
constexpr int64_t kRoutedExperts = 256;
constexpr int64_t kSharedExperts = 1;
constexpr int64_t kVocab = 129280;
constexpr int64_t kScaleBlock = 128;  // weight_block_size [128, 128]
constexpr uint64_t kShardBytes = 4'300'000'000;

// Appends tensors in model order, each linear weight in the form's dtype (and its scales).
class Builder {
 public:
  Builder(Skeleton* skeleton, DeepseekForm form) : skeleton_(skeleton), form_(form) {}

  void Tensor(std::string name, std::vector<int64_t> shape, DType dtype) {
    SkeletonTensor t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.dtype = dtype;
    skeleton_->tensors.push_back(std::move(t));
  }
  // What the release leaves in BF16: embeddings, lm_head, norms, the router.
  void Bf16(std::string name, std::vector<int64_t> shape) {
    Tensor(std::move(name), std::move(shape), DType::kBF16);
  }
  // A linear layer's weight [out, in]: FP8 codes and a scale per 128x128 block (the last
  // block of each dimension partial) in the release, BF16 otherwise.
  void Linear(const std::string& module, int64_t in, int64_t out) {
    if (form_ == DeepseekForm::kBf16) {
      Bf16(absl::StrCat(module, ".weight"), {out, in});
      return;
    }
    Tensor(absl::StrCat(module, ".weight"), {out, in}, DType::kF8E4M3);
    Tensor(absl::StrCat(module, ".weight_scale_inv"),
           {(out + kScaleBlock - 1) / kScaleBlock, (in + kScaleBlock - 1) / kScaleBlock}, DType::kF32);
  }
  void Mlp(const std::string& module, int64_t intermediate) {
    Linear(absl::StrCat(module, ".gate_proj"), kHidden, intermediate);
    Linear(absl::StrCat(module, ".up_proj"), kHidden, intermediate);
    Linear(absl::StrCat(module, ".down_proj"), intermediate, kHidden);
  }

 private:
  Skeleton* skeleton_;
  DeepseekForm form_;
};

void Layer(Builder& b, int64_t i) {
  const std::string layer = absl::StrCat("model.layers.", i);
  const std::string attn = layer + ".self_attn";
  b.Linear(attn + ".q_a_proj", kHidden, kQLoraRank);
  b.Bf16(attn + ".q_a_layernorm.weight", {kQLoraRank});
  b.Linear(attn + ".q_b_proj", kQLoraRank, kHeads * (kQkNopeHeadDim + kQkRopeHeadDim));
  b.Linear(attn + ".kv_a_proj_with_mqa", kHidden, kKvLoraRank + kQkRopeHeadDim);
  b.Bf16(attn + ".kv_a_layernorm.weight", {kKvLoraRank});
  b.Linear(attn + ".kv_b_proj", kKvLoraRank, kHeads * (kQkNopeHeadDim + kVHeadDim));
  b.Linear(attn + ".o_proj", kHeads * kVHeadDim, kHidden);
  const std::string mlp = layer + ".mlp";
  if (i < kDenseLayers) {
    b.Mlp(mlp, kIntermediate);
  } else {
    for (int64_t e = 0; e < kRoutedExperts; ++e) b.Mlp(absl::StrCat(mlp, ".experts.", e), kMoeIntermediate);
    b.Bf16(mlp + ".gate.weight", {kRoutedExperts, kHidden});
    b.Tensor(mlp + ".gate.e_score_correction_bias", {kRoutedExperts}, DType::kF32);
    b.Mlp(mlp + ".shared_experts", kMoeIntermediate * kSharedExperts);
  }
  b.Bf16(layer + ".input_layernorm.weight", {kHidden});
  b.Bf16(layer + ".post_attention_layernorm.weight", {kHidden});
}

// transformers' DeepseekV3 tp plan, as skeleton rules. A pattern's trailing `*` takes the FP8
// form's weight_scale_inv with its weight: every split extent of a quantized weight is a
// multiple of 8 x 128, so at --tp 8 no 128x128 block straddles two ranks.
std::vector<TpRule> TpRules() {
  std::vector<TpRule> rules;
  for (const char* column :
       {"*.self_attn.q_b_proj.weight*", "*.self_attn.kv_b_proj.weight*", "*.gate_proj.weight*",
        "*.up_proj.weight*", "model.embed_tokens.weight", "lm_head.weight"}) {
    rules.push_back(TpRule{column, "column", 0});
  }
  for (const char* row : {"*.self_attn.o_proj.weight*", "*.down_proj.weight*"}) {
    rules.push_back(TpRule{row, "row", 0});
  }
  rules.push_back(TpRule{"*", "replicate", 0});
  return rules;
}

}  // namespace

Skeleton DeepseekV3Skeleton(DeepseekForm form) {
  Skeleton skeleton;
  skeleton.model = form == DeepseekForm::kFp8 ? "deepseek-v3-671b-fp8" : "deepseek-v3-671b-bf16";
  skeleton.architecture = "DeepseekV3ForCausalLM";
  Builder b(&skeleton, form);
  b.Bf16("model.embed_tokens.weight", {kVocab, kHidden});
  for (int64_t i = 0; i < kLayers; ++i) {
    skeleton.modules.push_back(
        SkeletonModule{absl::StrCat("model.layers.", i), "DeepseekV3DecoderLayer", true});
    Layer(b, i);
  }
  b.Bf16("model.norm.weight", {kHidden});
  b.Bf16("lm_head.weight", {kVocab, kHidden});
  skeleton.tp_rules = TpRules();
  return skeleton;
}

Checkpoint DeepseekV3Checkpoint(const Skeleton& skeleton, const std::string& dir) {
  const uint64_t total = skeleton.total_size_bytes();
  return SyntheticCheckpoint(skeleton, dir, static_cast<int>((total + kShardBytes / 2) / kShardBytes));
}

}  // namespace metaload::bench
