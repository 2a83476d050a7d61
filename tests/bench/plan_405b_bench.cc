// Benchmark, not a test: plans a Llama-3.1-405B-shaped model (126 layers, hidden 16384,
// 128 heads, 8 KV heads, intermediate 53248, vocab 128256, bf16) on 1,024 GPUs (128 nodes x
// 8, --tp 8 --pp 16) and prints the median wall time of 5 plans and the peak RSS. Targets
// from issue 4: <= 100 ms and <= 200 MB. Run: build/tests/bench_plan_405b
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "planner/strategy.h"

namespace metaload {
namespace {

SkeletonTensor Tensor(std::string name, std::vector<int64_t> shape) {
  SkeletonTensor tensor;
  tensor.name = std::move(name);
  tensor.shape = std::move(shape);
  tensor.dtype = DType::kBF16;
  return tensor;
}

Skeleton Llama405B() {
  constexpr int kLayers = 126;
  constexpr int64_t kHidden = 16384, kHeadDim = 16384 / 128, kKvHeads = 8, kIntermediate = 53248,
                    kVocab = 128256;
  Skeleton s;
  s.model = "llama-3.1-405b-shaped";
  s.architecture = "LlamaForCausalLM";
  s.tensors.push_back(Tensor("model.embed_tokens.weight", {kVocab, kHidden}));
  for (int layer = 0; layer < kLayers; ++layer) {
    const std::string p = absl::StrCat("model.layers.", layer, ".");
    s.tensors.push_back(Tensor(p + "input_layernorm.weight", {kHidden}));
    s.tensors.push_back(Tensor(p + "self_attn.q_proj.weight", {kHidden, kHidden}));
    s.tensors.push_back(Tensor(p + "self_attn.k_proj.weight", {kKvHeads * kHeadDim, kHidden}));
    s.tensors.push_back(Tensor(p + "self_attn.v_proj.weight", {kKvHeads * kHeadDim, kHidden}));
    s.tensors.push_back(Tensor(p + "self_attn.o_proj.weight", {kHidden, kHidden}));
    s.tensors.push_back(Tensor(p + "post_attention_layernorm.weight", {kHidden}));
    s.tensors.push_back(Tensor(p + "mlp.gate_proj.weight", {kIntermediate, kHidden}));
    s.tensors.push_back(Tensor(p + "mlp.up_proj.weight", {kIntermediate, kHidden}));
    s.tensors.push_back(Tensor(p + "mlp.down_proj.weight", {kHidden, kIntermediate}));
    s.modules.push_back(SkeletonModule{absl::StrCat("model.layers.", layer), "LlamaDecoderLayer", true});
  }
  s.tensors.push_back(Tensor("model.norm.weight", {kHidden}));
  s.tensors.push_back(Tensor("lm_head.weight", {kVocab, kHidden}));
  return s;
}

int Run() {
  const Skeleton skeleton = Llama405B();
  absl::StatusOr<Cluster> cluster = MakeUniformCluster(1024, 128, 80ull << 30);
  if (!cluster.ok()) {
    std::fprintf(stderr, "%s\n", std::string(cluster.status().message()).c_str());
    return 1;
  }
  PlanRequest request;
  request.skeleton = &skeleton;
  request.cluster = &*cluster;
  request.options.strategy = "tp";
  request.options.tp = 8;
  request.options.pp = 16;
  std::vector<double> wall_ms;
  size_t items = 0;
  for (int run = 0; run < 5; ++run) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<Plan> plan = MakePlan(request);
    const auto end = std::chrono::steady_clock::now();
    if (!plan.ok()) {
      std::fprintf(stderr, "plan failed: %s\n", std::string(plan.status().message()).c_str());
      return 1;
    }
    if (run == 0) {
      absl::Status valid = ValidatePlan(*plan, skeleton);
      if (!valid.ok()) {
        std::fprintf(stderr, "invalid plan: %s\n", std::string(valid.message()).c_str());
        return 1;
      }
      for (const RankPlan& rank : plan->ranks) items += rank.items.size();
    }
    wall_ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }
  std::sort(wall_ms.begin(), wall_ms.end());
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);  // ru_maxrss is in KiB on Linux
  std::printf("plan llama-3.1-405b-shaped on 1024 GPUs (tp 8, pp 16, dp 8): %zu items\n", items);
  std::printf("wall_ms_median_of_5 %.1f (target <= 100)\n", wall_ms[2]);
  std::printf("peak_rss_mb %.1f (target <= 200)\n", static_cast<double>(usage.ru_maxrss) / 1024.0);
  return 0;
}

}  // namespace
}  // namespace metaload

int main() { return metaload::Run(); }
