// Every strategy on every real Hugging Face config of the fixtures: inside each replica the
// slices of every persistent tensor cover it exactly once (ValidatePlan), no rank over its
// budget, identical plans for identical inputs.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/hf_config.h"
#include "planner/strategy.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

std::vector<std::string> FixtureConfigs(const std::string& fixtures) {
  std::vector<std::string> configs;
  for (const auto& entry : std::filesystem::directory_iterator(fixtures + "/hf")) {
    const std::string config = entry.path().string() + "/config.json";
    if (std::filesystem::exists(config)) configs.push_back(config);
  }
  std::sort(configs.begin(), configs.end());
  return configs;
}

absl::StatusOr<Plan> Make(const Skeleton& s, const Cluster& c, const std::string& strategy, int tp = 1) {
  PlanRequest request;
  request.skeleton = &s;
  request.cluster = &c;
  request.options.strategy = strategy;
  request.options.tp = tp;
  return MakePlan(request);
}

// Plans twice, validates, compares the JSON bytes.
void ExpectValidAndDeterministic(const Skeleton& s, const Cluster& c, const std::string& strategy, int tp,
                                 const std::string& config) {
  SCOPED_TRACE(absl::StrCat(config, ": ", strategy, " tp ", tp));
  absl::StatusOr<Plan> plan = Make(s, c, strategy, tp);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::Status valid = ValidatePlan(*plan, s);
  EXPECT_TRUE(valid.ok()) << valid;
  for (const RankPlan& rank : plan->ranks)
    EXPECT_LE(rank.size_bytes, rank.budget_bytes) << "rank " << rank.rank;
  absl::StatusOr<Plan> again = Make(s, c, strategy, tp);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(PlanToJson(*plan), PlanToJson(*again));
}

TEST(StrategyFixturesTest, EveryStrategyOnEveryRealConfig) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  const std::vector<std::string> configs = FixtureConfigs(fixtures);
  ASSERT_FALSE(configs.empty()) << "no config.json under " << fixtures << "/hf";
  for (const std::string& config : configs) {
    absl::StatusOr<Skeleton> s = SkeletonFromHfConfigFile(config);
    ASSERT_TRUE(s.ok()) << s.status();
    // Big enough for the 180B model whole on one GPU: replicate is about coverage here.
    absl::StatusOr<Cluster> huge = MakeUniformCluster(2, 0, 1024 * kGiB);
    ASSERT_TRUE(huge.ok());
    ExpectValidAndDeterministic(*s, *huge, "replicate", 1, config);
    absl::StatusOr<Cluster> cluster = MakeUniformCluster(64, 0, 80 * kGiB);
    ASSERT_TRUE(cluster.ok());
    ExpectValidAndDeterministic(*s, *cluster, "fsdp", 1, config);
    // tp 8 (pp 8) and tp 2 (pp 32). A real vocabulary need not divide by tp (Mixtral's
    // 32002): what a user does then is replicate that tensor with a tp_rules override.
    for (int tp : {8, 2}) {
      Skeleton with_rules = *s;
      for (int attempt = 0; attempt < 4; ++attempt) {
        absl::StatusOr<Plan> plan = Make(with_rules, *cluster, "tp", tp);
        if (plan.ok() || plan.status().code() != absl::StatusCode::kInvalidArgument) break;
        const std::string message(plan.status().message());
        ASSERT_THAT(message, ::testing::HasSubstr("does not divide by --tp")) << config;
        const size_t begin = message.find("tensor ") + 7;
        with_rules.tp_rules.push_back(
            TpRule{message.substr(begin, message.find(' ', begin) - begin), "replicate", 0});
      }
      ExpectValidAndDeterministic(with_rules, *cluster, "tp", tp, config);
    }
  }
}

TEST(StrategyFixturesTest, NonDivisibleTpOnARealConfigNamesTheTensor) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  absl::StatusOr<Skeleton> s = SkeletonFromHfConfigFile(fixtures + "/hf/llama3.1-8b_modelstock/config.json");
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<Cluster> c = MakeUniformCluster(6, 0, 80 * kGiB);
  ASSERT_TRUE(c.ok());
  absl::StatusOr<Plan> plan = Make(*s, *c, "tp", 3);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  // 128256 rows of the embedding do divide by 3; the 4096 of hidden do not.
  EXPECT_THAT(std::string(plan.status().message()), ::testing::HasSubstr("does not divide by --tp 3"));
  EXPECT_THAT(std::string(plan.status().message()), ::testing::HasSubstr("tensor model."));
}

}  // namespace
}  // namespace metaload
