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
#include "planner/strategy/strategy.h"
#include "tests/bench/llama_405b.h"

namespace metaload {
namespace {

int Run() {
  const Skeleton skeleton = bench::Llama405BSkeleton();
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
