#include "tests/bench/llama_405b.h"

#include <cstdio>
#include <cstdlib>

#include "planner/skeleton/hf/hf_config.h"
#include "tests/bench/synthetic_checkpoint.h"

namespace metaload::bench {
namespace {

// meta-llama/Llama-3.1-405B's config.json, as published.
constexpr char kConfig[] = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 16384,
  "initializer_range": 0.02, "intermediate_size": 53248, "max_position_embeddings": 131072,
  "mlp_bias": false, "model_type": "llama", "num_attention_heads": 128, "num_hidden_layers": 126,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "use_cache": true, "vocab_size": 128256})";

constexpr int kShards = 191;

}  // namespace

Skeleton Llama405BSkeleton() {
  absl::StatusOr<Skeleton> skeleton = SkeletonFromHfConfig(kConfig, "llama-3.1-405b/config.json");
  if (!skeleton.ok()) {
    std::fprintf(stderr, "405B skeleton: %s\n", std::string(skeleton.status().message()).c_str());
    std::abort();
  }
  skeleton->model = "llama-3.1-405b";
  return *std::move(skeleton);
}

Checkpoint Llama405BCheckpoint(const Skeleton& skeleton, const std::string& dir) {
  return SyntheticCheckpoint(skeleton, dir, kShards);
}

}  // namespace metaload::bench
