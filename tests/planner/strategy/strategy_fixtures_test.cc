// Every strategy, as stored and with --dtype bf16 and fp32, on every real Hugging Face config
// of the fixtures: inside each replica the slices of every persistent tensor cover it exactly
// once (ValidatePlan), no rank over its budget, identical plans for identical inputs.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/skeleton/hf/hf_config.h"
#include "planner/strategy/strategy.h"
#include "tests/test_support.h"
#include "util/units.h"

namespace metaload {
namespace {

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

// The tp_rules overrides a user adds when --tp refuses a tensor: replicating each module the
// refusal says a contiguous split gets wrong (Phi-3's fused qkv_proj and gate_up_proj), as it
// suggests. A dim that does not divide (Mixtral's vocabulary of 32002 at --tp 8) needs none: it
// splits unevenly, as DTensor does.
Skeleton WithRulesFor(const Skeleton& s, const Cluster& c, int tp, const std::string& config) {
  const std::string kSuggested = "add {\"pattern\": \"";
  Skeleton with_rules = s;
  for (int attempt = 0; attempt < 4; ++attempt) {
    absl::StatusOr<Plan> plan = Make(with_rules, c, Options("tp", tp));
    if (plan.ok() || plan.status().code() != absl::StatusCode::kInvalidArgument) break;
    const std::string message(plan.status().message());
    const size_t at = message.find(kSuggested);
    if (at == std::string::npos) {
      ADD_FAILURE() << config << " at --tp " << tp << ": refused without a tp_rules fix: " << message;
      break;
    }
    const size_t begin = at + kSuggested.size();
    with_rules.tp_rules.push_back(
        TpRule{message.substr(begin, message.find('"', begin) - begin), "replicate", 0});
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

// Rank r's {start, length} of `tensor`, sliced on dim 0.
std::vector<std::pair<int64_t, int64_t>> Dim0SlicesOf(const Plan& plan, const std::string& tensor) {
  std::vector<std::pair<int64_t, int64_t>> slices;
  for (const RankPlan& rank : plan.ranks) {
    for (const ReadItem& item : rank.items) {
      if (item.tensor != tensor) continue;
      EXPECT_TRUE(item.slice.has_value() && item.slice->dim == 0) << tensor << " on rank " << rank.rank;
      if (item.slice.has_value()) slices.emplace_back(item.slice->start, item.slice->length);
    }
  }
  return slices;
}

using Slices = std::vector<std::pair<int64_t, int64_t>>;

// Mixtral-dolphin's vocabulary of 32002 used to be refused at --tp 4 and 8 ("does not divide by
// --tp"); now it splits as DTensor's Shard(0) does (torch.chunk: 8001, 8001, 8001, 7999), and every
// strategy and dtype plan validates at --tp 2, 4 and 8 without a tp_rules override.
TEST(StrategyFixturesTest, MixtralVocabularyOf32002SplitsLikeTorchChunk) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  const std::string config = fixtures + "/hf/mixtral-8x7b_dolphin2.5/config.json";
  absl::StatusOr<Skeleton> s = SkeletonFromHfConfigFile(config);
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<Cluster> cluster = MakeUniformCluster(64, 0, 80 * kGiB);
  ASSERT_TRUE(cluster.ok());
  for (int tp : {2, 4, 8}) {
    for (std::optional<DType> dtype : {std::optional<DType>(), std::optional<DType>(DType::kF32)}) {
      ExpectValidAndDeterministic(*s, *cluster, Options("tp", tp, dtype), config);
    }
  }
  absl::StatusOr<Plan> tp4 = Make(*s, *cluster, Options("tp", 4));
  ASSERT_TRUE(tp4.ok()) << tp4.status();
  const Slices vocab = {{0, 8001}, {8001, 8001}, {16002, 8001}, {24003, 7999}};
  // Stage 0 (ranks 0-3) holds the embedding, the last stage (ranks 60-63) the head.
  EXPECT_EQ(Dim0SlicesOf(*tp4, "model.embed_tokens.weight"), vocab);
  EXPECT_EQ(Dim0SlicesOf(*tp4, "lm_head.weight"), vocab);
  absl::StatusOr<Plan> tp2 = Make(*s, *cluster, Options("tp", 2));
  ASSERT_TRUE(tp2.ok()) << tp2.status();
  EXPECT_EQ(Dim0SlicesOf(*tp2, "lm_head.weight"), (Slices{{0, 16001}, {16001, 16001}}));
}

// Real vocabularies that do not divide, on real configs: Llama 3.1's 128256 + 6 added tokens at
// --tp 8, and 131074 at --tp 16 (a node of 16 GPUs). Values from torch 2.15's
// Shard.local_shard_size_and_offset.
TEST(StrategyFixturesTest, RealVocabulariesThatDoNotDivideSplitLikeDTensor) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  std::ifstream in(fixtures + "/hf/llama3.1-8b_modelstock/config.json");
  const nlohmann::json base = nlohmann::json::parse(in);
  struct Case {
    int64_t vocab;
    int tp;
    std::pair<int64_t, int64_t> last;
  };
  for (const Case& c : {Case{128262, 8, {112231, 16031}}, Case{131074, 16, {122895, 8179}}}) {
    SCOPED_TRACE(absl::StrCat("vocab ", c.vocab, " at --tp ", c.tp));
    nlohmann::json config = base;
    config["vocab_size"] = c.vocab;
    absl::StatusOr<Skeleton> s = SkeletonFromHfConfig(config.dump(), "llama3.1-8b");
    ASSERT_TRUE(s.ok()) << s.status();
    absl::StatusOr<Cluster> cluster = MakeUniformCluster(2 * c.tp, 2, 80 * kGiB);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    ExpectValidAndDeterministic(*s, *cluster, Options("tp", c.tp), "llama3.1-8b");
    absl::StatusOr<Plan> plan = Make(*s, *cluster, Options("tp", c.tp));
    ASSERT_TRUE(plan.ok()) << plan.status();
    const Slices embed = Dim0SlicesOf(*plan, "model.embed_tokens.weight");
    ASSERT_EQ(embed.size(), static_cast<size_t>(c.tp));
    const int64_t full = (c.vocab + c.tp - 1) / c.tp;
    for (int r = 0; r + 1 < c.tp; ++r) EXPECT_EQ(embed[r], (std::pair<int64_t, int64_t>{r * full, full}));
    EXPECT_EQ(embed.back(), c.last);
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
