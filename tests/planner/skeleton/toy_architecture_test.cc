// An architecture that exists only in this test: its record below, registered from the test,
// and nothing else. Built through SkeletonFromHfConfig (by class name, by model_type, by an old
// name), listed as supported and split by the tp strategy by its own TP rules, it proves what
// planner/README.md says adding an architecture
// takes: one file with the record, and its line in the table (here: RegisterArchitecture).
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/skeleton/hf/architecture_registry.h"
#include "planner/skeleton/hf/hf_arch.h"
#include "planner/skeleton/hf/hf_config.h"
#include "planner/strategy/strategies/tp_rules.h"
#include "planner/strategy/strategy.h"
#include "tests/planner/strategy/strategy_testing.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ToyForCausalLM: an embedding, `num_hidden_layers` blocks of a widening and a narrowing
// linear layer and a norm, a tied head.
absl::StatusOr<Skeleton> BuildToy(const HfConfigReader& config, absl::string_view architecture) {
  ML_ASSIGN_OR_RETURN(const int64_t vocab, config.Dim({"vocab_size"}));
  ML_ASSIGN_OR_RETURN(const int64_t hidden, config.Dim({"hidden_size"}));
  ML_ASSIGN_OR_RETURN(const int64_t layers, config.Count({"num_hidden_layers"}, kMaxHfLayers));
  ML_ASSIGN_OR_RETURN(const DType dtype, config.ParamDType());
  Skeleton skeleton;
  SkeletonBuilder b(&skeleton, dtype);
  b.Param("toy.embed.weight", {vocab, hidden});
  for (int64_t i = 0; i < layers; ++i) {
    const std::string block = absl::StrCat("toy.blocks.", i);
    b.Layer(block, "ToyBlock");
    b.Linear(block + ".mix.widen", hidden, 4 * hidden, /*bias=*/true);
    b.Linear(block + ".mix.narrow", 4 * hidden, hidden, /*bias=*/true);
    b.Norm(block + ".norm", hidden, /*bias=*/false);
  }
  b.LmHead(/*tied=*/true, "toy.embed.weight", vocab, hidden);
  return skeleton;
}

constexpr HfClass kToyClasses[] = {{"ToyForCausalLM", "toy"}, {"OldToyModel", "old_toy", "ToyForCausalLM"}};
constexpr ModuleTpRule kToyTpRules[] = {
    {"widen", TpParallel::kColumn}, {"narrow", TpParallel::kRow}, {"embed", TpParallel::kVocab}};
const Architecture kToyArchitecture(kToyClasses, &BuildToy, kToyTpRules);

class ToyArchitectureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static const absl::Status registered = RegisterArchitecture(kToyArchitecture);  // once per process
    ASSERT_TRUE(registered.ok()) << registered;
  }
};

constexpr char kToyConfig[] =
    R"({"architectures": ["ToyForCausalLM"], "vocab_size": 64, "hidden_size": 8, "num_hidden_layers": 2,
        "torch_dtype": "bfloat16"})";

TEST_F(ToyArchitectureTest, SkeletonFromHfConfigBuildsIt) {
  absl::StatusOr<Skeleton> s = SkeletonFromHfConfig(kToyConfig, "toy-1b/config.json");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->architecture, "ToyForCausalLM");
  EXPECT_EQ(s->model, "toy-1b");
  EXPECT_EQ(s->tensors.size(), 1u + 2 * 5);
  EXPECT_EQ(s->tensors[1].name, "toy.blocks.0.mix.widen.weight");
  EXPECT_EQ(s->modules.front().type, "ToyForCausalLM");  // the root module SkeletonFromHfConfig adds
  ASSERT_EQ(s->tied_groups.size(), 1u);
  EXPECT_THAT(s->tied_groups[0], ElementsAre("toy.embed.weight", "lm_head.weight"));
}

TEST_F(ToyArchitectureTest, ModelTypeAndOldNamesFindItAndSupportedListsItsClass) {
  absl::StatusOr<Skeleton> by_type = SkeletonFromHfConfig(
      R"({"model_type": "toy", "vocab_size": 64, "hidden_size": 8, "num_hidden_layers": 1})", "config.json");
  ASSERT_TRUE(by_type.ok()) << by_type.status();
  EXPECT_EQ(by_type->architecture, "ToyForCausalLM");
  absl::StatusOr<Skeleton> old = SkeletonFromHfConfig(
      R"({"architectures": ["OldToyModel"], "vocab_size": 64, "hidden_size": 8, "num_hidden_layers": 1})",
      "config.json");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->architecture, "ToyForCausalLM");  // the class it loads as
  EXPECT_EQ(SupportedHfArchitectures().back(), "ToyForCausalLM");
  const absl::Status unknown =
      SkeletonFromHfConfig(R"({"architectures": ["BertModel"]})", "config.json").status();
  EXPECT_THAT(std::string(unknown.message()), HasSubstr("GPT2LMHeadModel, ToyForCausalLM)"));
  EXPECT_THAT(std::string(unknown.message()), ::testing::Not(HasSubstr("OldToyModel")));
}

TEST_F(ToyArchitectureTest, TheTpStrategySplitsItByItsOwnRules) {
  EXPECT_EQ(BuiltInTpSplitDim("toy.blocks.0.mix.widen.weight", 2), 0);
  EXPECT_EQ(BuiltInTpSplitDim("toy.blocks.0.mix.widen.bias", 1), 0);
  EXPECT_EQ(BuiltInTpSplitDim("toy.blocks.0.mix.narrow.weight", 2), 1);
  EXPECT_EQ(BuiltInTpSplitDim("toy.blocks.0.mix.narrow.bias", 1), kTpReplicate);
  EXPECT_EQ(BuiltInTpSplitDim("toy.blocks.0.norm.weight", 1), kTpReplicate);
  absl::StatusOr<Skeleton> s = SkeletonFromHfConfig(kToyConfig, "toy/config.json");
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<Plan> plan = testing::PlanOnGpus(*s, "tp", 2, 1ull << 30, /*tp=*/2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(ValidatePlan(*plan, *s).ok()) << ValidatePlan(*plan, *s);
  int checked = 0;
  for (const ReadItem& item : plan->ranks[1].items) {
    if (item.tensor == "toy.blocks.1.mix.narrow.weight") {
      ASSERT_TRUE(item.slice.has_value());
      EXPECT_EQ(item.slice->dim, 1);
      EXPECT_EQ(item.slice->start, 16);  // the second half of 32 input features
      ++checked;
    }
    if (item.tensor == "toy.blocks.1.norm.weight") {
      EXPECT_FALSE(item.slice.has_value());
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2);
}

TEST_F(ToyArchitectureTest, AClassOrModelTypeTakenAlreadyIsRefused) {
  EXPECT_EQ(RegisterArchitecture(kToyArchitecture).code(), absl::StatusCode::kAlreadyExists);
  static constexpr HfClass kLlama[] = {{"LlamaForCausalLM", "not_llama"}};
  static const Architecture kClash(kLlama, &BuildToy, {});
  EXPECT_EQ(RegisterArchitecture(kClash).message(),
            "architecture LlamaForCausalLM (model_type \"not_llama\") is registered already");
  static const Architecture kNoBuilder(kToyClasses, nullptr, {});
  EXPECT_EQ(RegisterArchitecture(kNoBuilder).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace metaload
