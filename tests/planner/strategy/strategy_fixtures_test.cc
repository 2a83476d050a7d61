// Every strategy, as stored and with --dtype bf16 and fp32, on every real Hugging Face config
// of the fixtures: inside each replica the slices of every persistent tensor cover it exactly
// once (ValidatePlan), no rank over its budget, identical plans for identical inputs.
#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/skeleton/hf/hf_config.h"
#include "planner/strategy/strategy.h"
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

StrategyOptions Options(const std::string& strategy, int tp = 1,
                        std::optional<DType> load_dtype = std::nullopt) {
  StrategyOptions options;
  options.strategy = strategy;
  options.tp = tp;
  options.load_dtype = load_dtype;
  return options;
}

absl::StatusOr<Plan> Make(const Skeleton& s, const Cluster& c, const StrategyOptions& options) {
  PlanRequest request;
  request.skeleton = &s;
  request.cluster = &c;
  request.options = options;
  return MakePlan(request);
}

// Plans twice, validates, compares the JSON bytes; with --dtype, every stored float tensor is
// held in it and nothing else is converted.
void ExpectValidAndDeterministic(const Skeleton& s, const Cluster& c, const StrategyOptions& options,
                                 const std::string& config) {
  SCOPED_TRACE(absl::StrCat(config, ": ", options.strategy, " tp ", options.tp, " dtype ",
                            options.load_dtype.has_value() ? DTypeCode(*options.load_dtype) : "as stored"));
  absl::StatusOr<Plan> plan = Make(s, c, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::Status valid = ValidatePlan(*plan, s);
  EXPECT_TRUE(valid.ok()) << valid;
  for (const RankPlan& rank : plan->ranks) {
    EXPECT_LE(rank.size_bytes, rank.budget_bytes) << "rank " << rank.rank;
    for (const ReadItem& item : rank.items) {
      const bool converts =
          options.load_dtype.has_value() && item.init.empty() && IsConvertibleFloat(item.dtype);
      ASSERT_EQ(LoadDType(item), converts ? *options.load_dtype : item.dtype) << item.tensor;
    }
  }
  absl::StatusOr<Plan> again = Make(s, c, options);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(PlanToJson(*plan), PlanToJson(*again));
}

// The tp_rules overrides a user adds when --tp refuses a tensor: replicating each tensor whose
// split dim does not divide by `tp` (Mixtral's vocabulary of 32002), and each module the refusal
// says a contiguous split gets wrong (Phi-3's fused qkv_proj and gate_up_proj), as it suggests.
Skeleton WithRulesFor(const Skeleton& s, const Cluster& c, int tp, const std::string& config) {
  const std::string kSuggested = "add {\"pattern\": \"";
  Skeleton with_rules = s;
  for (int attempt = 0; attempt < 4; ++attempt) {
    absl::StatusOr<Plan> plan = Make(with_rules, c, Options("tp", tp));
    if (plan.ok() || plan.status().code() != absl::StatusCode::kInvalidArgument) break;
    const std::string message(plan.status().message());
    if (const size_t at = message.find(kSuggested); at != std::string::npos) {
      const size_t begin = at + kSuggested.size();
      with_rules.tp_rules.push_back(
          TpRule{message.substr(begin, message.find('"', begin) - begin), "replicate", 0});
      continue;
    }
    EXPECT_THAT(message, ::testing::HasSubstr("does not divide by --tp")) << config;
    const size_t begin = message.find("tensor ") + 7;
    with_rules.tp_rules.push_back(
        TpRule{message.substr(begin, message.find(' ', begin) - begin), "replicate", 0});
  }
  return with_rules;
}

TEST(StrategyFixturesTest, EveryStrategyAndDtypeOnEveryRealConfig) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  const std::vector<std::string> configs = FixtureConfigs(fixtures);
  ASSERT_FALSE(configs.empty()) << "no config.json under " << fixtures << "/hf";
  // Big enough for the 180B model whole on one GPU, even in fp32: replicate is about coverage.
  absl::StatusOr<Cluster> huge = MakeUniformCluster(2, 0, 1024 * kGiB);
  absl::StatusOr<Cluster> cluster = MakeUniformCluster(64, 0, 80 * kGiB);
  ASSERT_TRUE(huge.ok() && cluster.ok());
  for (const std::string& config : configs) {
    absl::StatusOr<Skeleton> s = SkeletonFromHfConfigFile(config);
    ASSERT_TRUE(s.ok()) << s.status();
    // tp 8 (pp 8) and tp 2 (pp 32).
    const Skeleton tp8 = WithRulesFor(*s, *cluster, 8, config);
    const Skeleton tp2 = WithRulesFor(*s, *cluster, 2, config);
    for (std::optional<DType> dtype :
         {std::optional<DType>(), std::optional<DType>(DType::kBF16), std::optional<DType>(DType::kF32)}) {
      ExpectValidAndDeterministic(*s, *cluster, Options("layers", 1, dtype), config);
      ExpectValidAndDeterministic(*s, *huge, Options("replicate", 1, dtype), config);
      ExpectValidAndDeterministic(*s, *cluster, Options("fsdp", 1, dtype), config);
      ExpectValidAndDeterministic(tp8, *cluster, Options("tp", 8, dtype), config);
      ExpectValidAndDeterministic(tp2, *cluster, Options("tp", 2, dtype), config);
    }
  }
}

absl::Status TpRefusal(const std::string& config, int tp) {
  absl::StatusOr<Skeleton> s = SkeletonFromHfConfigFile(config);
  EXPECT_TRUE(s.ok()) << s.status();
  absl::StatusOr<Cluster> c = MakeUniformCluster(2 * tp, 0, 80 * kGiB);
  EXPECT_TRUE(c.ok());
  if (!s.ok() || !c.ok()) return absl::InternalError("no skeleton or cluster");
  absl::StatusOr<Plan> plan = Make(*s, *c, Options("tp", tp));
  return plan.ok() ? absl::OkStatus() : plan.status();
}

TEST(StrategyFixturesTest, HeadsThatDoNotDivideByTpOnARealConfigNameTheTensor) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  // 128256 rows of the embedding and the 4096 of q_proj divide by 3; its 32 heads do not.
  absl::Status refused = TpRefusal(fixtures + "/hf/llama3.1-8b_modelstock/config.json", 3);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      refused.message(),
      "tensor model.layers.0.self_attn.q_proj.weight [4096, 4096]: its 32 attention heads do not divide by "
      "--tp 3 (each rank of a tensor-parallel group holds whole heads)");
}

// Phi-3 fuses [q; k; v] and [gate; up]: a contiguous split used to give rank 0 of --tp 2 all of
// q and half of k. Now refused, with the tp_rules fix (EveryStrategyAndDtypeOnEveryRealConfig
// plans it with that fix).
TEST(StrategyFixturesTest, Phi3FusedProjectionsAreRefusedAtEveryTp) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  for (int tp : {2, 8}) {
    absl::Status refused = TpRefusal(fixtures + "/hf/phi3-mini-3.8b_slerp/config.json", tp);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(
        refused.message(),
        absl::StrCat("tensor model.layers.0.self_attn.qkv_proj.weight [9216, 3072]: dim 0 concatenates "
                     "[q; k; v], and one contiguous slice per rank cannot hold matching pieces of each part, "
                     "so --tp ",
                     tp,
                     " cannot split it; if your runtime replicates it, add {\"pattern\": \"*.qkv_proj.*\", "
                     "\"split\": \"replicate\"} to \"tp_rules\" in model.json"));
  }
}

}  // namespace
}  // namespace metaload
