// Every offline step from a safetensors header to a plan's JSON grows linearly (n log n) with
// the number of tensors: a model of 100k tensors (DeepSeek-V3 has ~91k) must cost about ten
// times one of 10k, never a hundred. No time budget: each step is timed against a linear
// yardstick in the same process, at two sizes, so that a slow or busy machine, or a cache the
// larger size outgrows, changes both alike; the fastest of a few runs counts, which keeps
// another process's burst from failing the test. A quadratic step (the strict JSON parser once
// was: 3.8 s for 16,000 tensors, 41.6 s for 25,000) grows ~10 times faster than the yardstick.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/format/checkpoint.h"
#include "planner/format/safetensors.h"
#include "planner/plan/cluster.h"
#include "planner/plan/plan.h"
#include "planner/skeleton/skeleton.h"
#include "planner/strategy/strategy.h"
#include "util/json/strict_json.h"

namespace metaload {
namespace {

constexpr int kSmallTensors = 2'000;
constexpr int kScale = 25;
// How much more a step may cost per tensor, relative to a linear yardstick, at kScale x the
// tensors: ~1 when linear, ~kScale when quadratic.
constexpr double kMaxGrowth = 3;

// DeepSeek-V3's expert tensors, 256 experts x 3 per layer, each [8, 16] BF16 (256 bytes).
std::string ExpertName(int i) {
  return absl::StrCat("model.layers.", i / 768, ".mlp.experts.", i / 3 % 256, ".",
                      (i % 3 == 0   ? "gate_proj"
                       : i % 3 == 1 ? "up_proj"
                                    : "down_proj"),
                      ".weight");
}
constexpr uint64_t kTensorBytes = 8 * 16 * 2;

// A whole safetensors file's first bytes: the length prefix and the header (data offsets
// contiguous, as safetensors writes them).
std::string HeaderFile(int tensors) {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  for (int i = 0; i < tensors; ++i) {
    absl::StrAppend(&header, ",\"", ExpertName(i),
                    "\":{\"dtype\":\"BF16\",\"shape\":[8,16],\"data_offsets\":[", i * kTensorBytes, ",",
                    (i + 1) * kTensorBytes, "]}");
  }
  header += "}";
  std::string prefix(8, '\0');
  for (int b = 0; b < 8; ++b) prefix[b] = static_cast<char>((header.size() >> (8 * b)) & 0xFF);
  return prefix + header;
}

std::string IndexJson(int tensors) {
  std::string text =
      absl::StrCat("{\"metadata\":{\"total_size\":", tensors * kTensorBytes, "},\"weight_map\":{");
  for (int i = 0; i < tensors; ++i) {
    absl::StrAppend(&text, i ? "," : "", "\"", ExpertName(i), "\":\"model-", 1 + i / 600,
                    "-of-0163.safetensors\"");
  }
  return text + "}}";
}

Checkpoint CheckpointOf(int tensors) {
  const std::string file = HeaderFile(tensors);
  absl::StatusOr<SafetensorsFile> parsed =
      ParseSafetensorsHeader(file, file.size() + tensors * kTensorBytes, "x");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  Checkpoint checkpoint;
  checkpoint.dir = "/ckpt";
  checkpoint.files = {"x"};
  if (parsed.ok()) checkpoint.tensors = std::move(parsed->tensors);
  checkpoint.BuildIndex();
  return checkpoint;
}

// A model of n tensors to plan: its checkpoint, its skeleton, a node of two GPUs;
// FsdpPlan() is what `metactl plan --strategy fsdp --gpus 2` makes of it.
struct PlanInputs {
  explicit PlanInputs(int n) : checkpoint(CheckpointOf(n)), skeleton(DeriveSkeleton(checkpoint, "m")) {
    absl::StatusOr<Cluster> made = MakeUniformCluster(2, 1, 80ull << 30);
    EXPECT_TRUE(made.ok()) << made.status();
    if (made.ok()) cluster = *std::move(made);
  }
  absl::StatusOr<Plan> FsdpPlan() const {
    PlanRequest request{
        .skeleton = &skeleton, .checkpoint = &checkpoint, .cluster = &cluster, .world_size = 2};
    request.options.strategy = "fsdp";
    return MakePlan(request);
  }
  Checkpoint checkpoint;
  Skeleton skeleton;
  Cluster cluster;
};

double Seconds(const std::function<void()>& step) {
  const auto start = std::chrono::steady_clock::now();
  step();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The yardstick: nlohmann's own DOM parser (no callback, no duplicate check) on a header of
// n tensors, linear, and as hungry for memory and allocations as the steps measured, so that
// caches that a larger model outgrows slow both alike.
std::function<void()> Yardstick(int n) {
  return [text = HeaderFile(n).substr(8)] { ASSERT_FALSE(nlohmann::json::parse(text).empty()); };
}

// `make(n)` prepares a step over n tensors (untimed) and returns it. The step's time relative
// to the yardstick's, at kScale x the tensors, must stay about what it was: a linear step keeps
// it (~1), a quadratic one multiplies it by ~kScale. Each attempt runs the small size 15 times
// and the large once, the step and the yardstick interleaved, and the fastest of each so far
// counts; the test makes another attempt (kAttempts in all) only while the bound fails and the
// large step still takes under kSlowSeconds, so that noise gets retried and a quadratic step
// costs seconds, not minutes. Ten, not three: on a machine loaded four times over (a build
// beside the tests, 2026-12-06) the small yardstick's fastest of 45 runs was 11.2 ms against
// 0.4 ms alone, and the index step "grew" 8.7 times.
constexpr double kSlowSeconds = 5;
constexpr int kAttempts = 10;
using StepMaker = std::function<std::function<void()>(int)>;
void ExpectLinear(const char* what, const StepMaker& make, const StepMaker& yardstick = Yardstick) {
  const int large_n = kSmallTensors * kScale;
  const std::function<void()> small = make(kSmallTensors), large = make(large_n);
  const std::function<void()> small_yardstick = yardstick(kSmallTensors),
                              large_yardstick = yardstick(large_n);
  double small_s = 1e300, small_yardstick_s = 1e300, large_s = 1e300, large_yardstick_s = 1e300;
  auto growth = [&] { return (large_s / large_yardstick_s) / (small_s / small_yardstick_s); };
  for (int attempt = 0;
       attempt < kAttempts && (attempt == 0 || (growth() > kMaxGrowth && large_s < kSlowSeconds));
       ++attempt) {
    for (int run = 0; run < 15; ++run) {
      small_yardstick_s = std::min(small_yardstick_s, Seconds(small_yardstick));
      small_s = std::min(small_s, Seconds(small));
    }
    large_yardstick_s = std::min(large_yardstick_s, Seconds(large_yardstick));
    large_s = std::min(large_s, Seconds(large));
  }
  std::printf("%s: %d tensors %.1f ms (yardstick %.1f), %d tensors %.1f ms (yardstick %.1f): growth %.2f\n",
              what, kSmallTensors, small_s * 1e3, small_yardstick_s * 1e3, large_n, large_s * 1e3,
              large_yardstick_s * 1e3, growth());
  EXPECT_LE(growth(), kMaxGrowth) << what << ": relative to a linear parse, " << large_n << " tensors cost "
                                  << growth() << " times what " << kSmallTensors
                                  << " did (1 is linear; a quadratic step gives ~" << kScale << ")";
}

// The strict parser on the shapes of a header (an object of objects) and of a skeleton's or a
// plan's lists (an array of objects), against nlohmann's own parser on the same text.
StepMaker StrictJson(const std::string& open, const std::string& close, bool keys, bool strict) {
  return [=](int n) {
    std::string text = open;
    for (int i = 0; i < n; ++i)
      absl::StrAppend(&text, i ? "," : "", keys ? absl::StrCat("\"", i, "\":") : "", "{}");
    text += close;
    return [text, strict] {
      if (!strict) {
        ASSERT_FALSE(nlohmann::json::parse(text).empty());
        return;
      }
      absl::StatusOr<nlohmann::json> parsed = ParseJsonRejectingDuplicateKeys(text);
      ASSERT_TRUE(parsed.ok()) << parsed.status();
    };
  };
}

TEST(LinearScale, StrictJsonObjectOfObjects) {
  ExpectLinear("ParseJsonRejectingDuplicateKeys({\"0\": {}, ...})", StrictJson("{", "}", true, true),
               StrictJson("{", "}", true, false));
}

TEST(LinearScale, StrictJsonArrayOfObjects) {
  ExpectLinear("ParseJsonRejectingDuplicateKeys([{}, ...])", StrictJson("[", "]", false, true),
               StrictJson("[", "]", false, false));
}

TEST(LinearScale, SafetensorsHeaderParsing) {
  ExpectLinear("ParseSafetensorsHeader", [](int n) {
    return [file = HeaderFile(n), n] {
      absl::StatusOr<SafetensorsFile> parsed =
          ParseSafetensorsHeader(file, file.size() + n * kTensorBytes, "x");
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      ASSERT_EQ(parsed->tensors.size(), static_cast<size_t>(n));
    };
  });
}

TEST(LinearScale, CheckpointIndexParsing) {
  ExpectLinear("ParseCheckpointIndex", [](int n) {
    return [text = IndexJson(n), n] {
      absl::StatusOr<CheckpointIndex> index = ParseCheckpointIndex(text, "index.json");
      ASSERT_TRUE(index.ok()) << index.status();
      ASSERT_EQ(index->weight_map.size(), static_cast<size_t>(n));
    };
  });
}

TEST(LinearScale, SkeletonDerivingAndWriting) {
  ExpectLinear("DeriveSkeleton + SkeletonToJson", [](int n) {
    return [checkpoint = CheckpointOf(n)] {
      ASSERT_FALSE(SkeletonToJson(DeriveSkeleton(checkpoint, "m")).empty());
    };
  });
}

TEST(LinearScale, SkeletonJsonParsing) {
  ExpectLinear("ParseSkeletonJson", [](int n) {
    return [text = SkeletonToJson(DeriveSkeleton(CheckpointOf(n), "m")), n] {
      absl::StatusOr<Skeleton> parsed = ParseSkeletonJson(text, "model.json");
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      ASSERT_EQ(parsed->tensors.size(), static_cast<size_t>(n));
    };
  });
}

TEST(LinearScale, Planning) {
  ExpectLinear("MakePlan (fsdp, 2 ranks) + PlanToJson", [](int n) {
    return [inputs = std::make_shared<PlanInputs>(n)] {
      absl::StatusOr<Plan> plan = inputs->FsdpPlan();
      ASSERT_TRUE(plan.ok()) << plan.status();
      ASSERT_FALSE(PlanToJson(*plan).empty());
    };
  });
}

TEST(LinearScale, PlanJsonParsing) {
  ExpectLinear("PlanFromJson", [](int n) {
    absl::StatusOr<Plan> plan = PlanInputs(n).FsdpPlan();
    EXPECT_TRUE(plan.ok()) << plan.status();
    return [text = plan.ok() ? PlanToJson(*plan) : std::string(), n] {
      absl::StatusOr<Plan> parsed = PlanFromJson(text);
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      ASSERT_EQ(parsed->ranks.front().items.size(), static_cast<size_t>(n));
    };
  });
}

}  // namespace
}  // namespace metaload
