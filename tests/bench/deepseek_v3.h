// A DeepSeek-V3-shaped model (671B) for benchmarks, with no bytes on disk: the tensors of the
// published checkpoint's names and shapes (deepseek-ai/DeepSeek-V3's config.json: 61 layers,
// hidden 7168, 128 heads with multi-head latent attention, q_lora_rank 1536, kv_lora_rank 512,
// qk_nope_head_dim 128 + qk_rope_head_dim 64, v_head_dim 128; the first 3 layers a dense MLP of
// 18432, the other 58 a router of 256 experts (with its e_score_correction_bias), 256 routed
// experts of 2048 and 1 shared expert; vocab 129280, untied). The multi-token-prediction layer
// the release stores as model.layers.61 is left out, as transformers leaves it out: 671.0 B
// parameters. No rotary buffer (it holds no checkpoint bytes).
//
// Two forms: kBf16 (every value BF16, the router's bias F32: 1.34 TB, what a dequantized or
// BF16 re-release holds), and kFp8 (as released: each linear weight of the layers F8_E4M3 with
// its F32 weight_scale_inv, one scale per 128x128 block; embeddings, lm_head, norms and the
// router BF16: 0.69 TB). The tp strategy splits it by the skeleton's own rules, as
// transformers' DeepseekV3 tp plan does: q_b_proj, kv_b_proj, gate/up (dense, experts, shared)
// column-parallel; o_proj and down row-parallel; embeddings and lm_head by vocabulary; the
// low-rank q_a_proj and kv_a_proj_with_mqa, norms and the router whole on every rank.
#ifndef METALOAD_TESTS_BENCH_DEEPSEEK_V3_H_
#define METALOAD_TESTS_BENCH_DEEPSEEK_V3_H_

#include <string>

#include "planner/format/checkpoint.h"
#include "planner/skeleton/skeleton.h"

namespace metaload::bench {

enum class DeepseekForm { kBf16, kFp8 };

Skeleton DeepseekV3Skeleton(DeepseekForm form);
// Every persistent tensor of `skeleton` under `dir` (not created), in shards of about 4.3 GB
// (the release's 163 shards of its 0.69 TB).
Checkpoint DeepseekV3Checkpoint(const Skeleton& skeleton, const std::string& dir);

}  // namespace metaload::bench

#endif  // METALOAD_TESTS_BENCH_DEEPSEEK_V3_H_
