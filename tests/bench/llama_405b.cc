#include "tests/bench/llama_405b.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_format.h"
#include "planner/skeleton/hf/hf_config.h"

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
  const uint64_t per_shard = skeleton.total_size_bytes() / kShards + 1;
  Checkpoint checkpoint;
  checkpoint.dir = dir;
  int shard = 1;
  uint64_t offset = 0, in_shard = 0;
  for (const SkeletonTensor& t : skeleton.tensors) {
    if (!t.persistent) continue;
    if (in_shard >= per_shard && shard < kShards) {
      ++shard;
      in_shard = 0;
      offset = 0;
    }
    TensorLayout layout;
    layout.name = t.name;
    layout.dtype = t.dtype;
    layout.shape = t.shape;
    layout.file = absl::StrFormat("model-%05d-of-%05d.safetensors", shard, kShards);
    layout.begin_offset = 8 + 65536 + offset;  // the 8-byte length and a header
    layout.end_offset = layout.begin_offset + t.size_bytes();
    offset += t.size_bytes();
    in_shard += t.size_bytes();
    if (checkpoint.files.empty() || checkpoint.files.back() != layout.file)
      checkpoint.files.push_back(layout.file);
    checkpoint.tensors.push_back(std::move(layout));
  }
  checkpoint.BuildIndex();
  return checkpoint;
}

}  // namespace metaload::bench
