// Built-in tensor-parallel rules per architecture, the skeleton's "tp_rules" overrides
// (parsed strictly, written back, first match wins), and the glob they use.
#include "planner/strategy/strategies/tp_rules.h"

#include <string>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/strategy/strategy.h"
#include "tests/planner/model_builders.h"
#include "tests/planner/strategy/strategy_testing.h"

namespace metaload {
namespace {

using ::testing::HasSubstr;

TEST(BuiltInTpRulesTest, LlamaColumnRowVocabAndNorms) {
  EXPECT_EQ(BuiltInTpSplitDim("model.layers.3.self_attn.q_proj.weight", 2), 0);
  EXPECT_EQ(BuiltInTpSplitDim("model.layers.3.self_attn.k_proj.bias", 1), 0);
  EXPECT_EQ(BuiltInTpSplitDim("model.layers.3.self_attn.o_proj.weight", 2), 1);
  EXPECT_EQ(BuiltInTpSplitDim("model.layers.3.self_attn.o_proj.bias", 1), kTpReplicate);
  EXPECT_EQ(BuiltInTpSplitDim("model.layers.3.mlp.down_proj.weight", 2), 1);
  EXPECT_EQ(BuiltInTpSplitDim("model.embed_tokens.weight", 2), 0);
  EXPECT_EQ(BuiltInTpSplitDim("lm_head.weight", 2), 0);
  EXPECT_EQ(BuiltInTpSplitDim("model.layers.3.input_layernorm.weight", 1), kTpReplicate);
  EXPECT_EQ(BuiltInTpSplitDim("model.layers.3.self_attn.rotary_emb.inv_freq", 1), kTpReplicate);
}

TEST(BuiltInTpRulesTest, FusedProjectionsOfPhi3AndFalcon) {
  EXPECT_EQ(BuiltInTpSplitDim("model.layers.0.self_attn.qkv_proj.weight", 2), 0);
  EXPECT_EQ(BuiltInTpSplitDim("model.layers.0.mlp.gate_up_proj.weight", 2), 0);
  EXPECT_EQ(BuiltInTpSplitDim("transformer.h.0.self_attention.query_key_value.weight", 2), 0);
  EXPECT_EQ(BuiltInTpSplitDim("transformer.h.0.self_attention.dense.weight", 2), 1);
  EXPECT_EQ(BuiltInTpSplitDim("transformer.word_embeddings.weight", 2), 0);
}

TEST(BuiltInTpRulesTest, Gpt2Conv1DWeightsAreTransposed) {
  EXPECT_EQ(BuiltInTpSplitDim("transformer.h.0.attn.c_attn.weight", 2), 1);
  EXPECT_EQ(BuiltInTpSplitDim("transformer.h.0.attn.c_attn.bias", 1), 0);
  EXPECT_EQ(BuiltInTpSplitDim("transformer.h.0.mlp.c_fc.weight", 2), 1);
  EXPECT_EQ(BuiltInTpSplitDim("transformer.h.0.mlp.c_proj.weight", 2), 0);
  EXPECT_EQ(BuiltInTpSplitDim("transformer.h.0.mlp.c_proj.bias", 1), kTpReplicate);
  EXPECT_EQ(BuiltInTpSplitDim("transformer.wte.weight", 2), 0);
  EXPECT_EQ(BuiltInTpSplitDim("transformer.wpe.weight", 2), kTpReplicate);
}

TEST(BuiltInTpRulesTest, MixtralExpertsSplitInsideEachExpertRouterReplicated) {
  EXPECT_EQ(BuiltInTpSplitDim("model.layers.0.block_sparse_moe.experts.7.w1.weight", 2), 0);
  EXPECT_EQ(BuiltInTpSplitDim("model.layers.0.block_sparse_moe.experts.7.w3.weight", 2), 0);
  EXPECT_EQ(BuiltInTpSplitDim("model.layers.0.block_sparse_moe.experts.7.w2.weight", 2), 1);
  EXPECT_EQ(BuiltInTpSplitDim("model.layers.0.block_sparse_moe.gate.weight", 2), kTpReplicate);
}

TEST(BuiltInTpRulesTest, AttentionModulesSayWhatTheirSplitDimHolds) {
  auto heads = [](const char* name, size_t dims) { return BuiltInTpSplit(name, dims).heads; };
  EXPECT_EQ(heads("model.layers.0.self_attn.q_proj.bias", 1), TpHeads::kQuery);
  EXPECT_EQ(heads("model.layers.0.self_attn.o_proj.weight", 2), TpHeads::kQuery);
  EXPECT_EQ(heads("model.layers.0.self_attn.o_proj.bias", 1), TpHeads::kNone);  // replicated
  EXPECT_EQ(heads("model.layers.0.self_attn.v_proj.weight", 2), TpHeads::kKeyValue);
  EXPECT_EQ(heads("transformer.h.0.self_attention.query_key_value.weight", 2), TpHeads::kFalconGroups);
  // "dense" and "c_proj" hold heads only as an attention's output projection.
  EXPECT_EQ(heads("transformer.h.0.self_attention.dense.weight", 2), TpHeads::kQuery);
  EXPECT_EQ(heads("encoder.layer.0.intermediate.dense.weight", 2), TpHeads::kNone);
  EXPECT_EQ(heads("transformer.h.0.attn.c_proj.weight", 2), TpHeads::kQuery);
  EXPECT_EQ(heads("transformer.h.0.crossattention.c_proj.weight", 2), TpHeads::kQuery);
  EXPECT_EQ(heads("transformer.h.0.mlp.c_proj.weight", 2), TpHeads::kNone);
  EXPECT_EQ(heads("model.layers.0.mlp.down_proj.weight", 2), TpHeads::kNone);
  // Parts laid end to end, named for the refusal.
  EXPECT_EQ(BuiltInTpSplit("transformer.h.0.attn.c_attn.weight", 2).parts, "[q; k; v]");
  EXPECT_EQ(BuiltInTpSplit("transformer.h.0.attn.c_attn.weight", 2).dim, 1);
  EXPECT_EQ(BuiltInTpSplit("transformer.h.0.crossattention.c_attn.bias", 1).parts, "[k; v]");
  EXPECT_EQ(BuiltInTpSplit("model.layers.0.self_attn.qkv_proj.weight", 2).parts, "[q; k; v]");
  EXPECT_EQ(BuiltInTpSplit("model.layers.0.mlp.gate_up_proj.weight", 2).parts, "[gate; up]");
  // A skeleton rule decides alone: no head structure.
  EXPECT_EQ(TpSplitOf({{"*.q_proj.*", "column", 0}}, "a.q_proj.weight", 2).heads, TpHeads::kNone);
}

TEST(GlobTest, StarMatchesAnyRunDotsIncluded) {
  EXPECT_TRUE(GlobMatches("*.q_proj.weight", "model.layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(GlobMatches("model.*.mlp.*", "model.layers.12.mlp.up_proj.weight"));
  EXPECT_TRUE(GlobMatches("lm_head.weight", "lm_head.weight"));
  EXPECT_TRUE(GlobMatches("*", ""));
  EXPECT_FALSE(GlobMatches("*.q_proj.weight", "model.layers.0.self_attn.q_proj.bias"));
  EXPECT_FALSE(GlobMatches("lm_head", "lm_head.weight"));
  EXPECT_FALSE(GlobMatches("*.w?", "x.w1"));  // only `*` is special
}

TEST(SkeletonTpRulesTest, FirstMatchWinsThenBuiltIns) {
  std::vector<TpRule> rules = {{"*.q_proj.weight", "row", 0},
                               {"*.q_proj.*", "column", 0},
                               {"*.norm.weight", "dim", 0},
                               {"lm_head.weight", "replicate", 0}};
  EXPECT_EQ(TpSplitDim(rules, "a.q_proj.weight", 2), 1);
  EXPECT_EQ(TpSplitDim(rules, "a.q_proj.bias", 1), 0);
  EXPECT_EQ(TpSplitDim(rules, "model.norm.weight", 1), 0);
  EXPECT_EQ(TpSplitDim(rules, "lm_head.weight", 2), kTpReplicate);
  EXPECT_EQ(TpSplitDim(rules, "a.o_proj.weight", 2), 1);  // built-in
}

constexpr char kSkeletonWithRules[] = R"({
  "format": "metaload.skeleton/1",
  "tensors": [{"name": "a.q_proj.weight", "shape": [4, 6], "dtype": "BF16"},
              {"name": "lm_head.weight", "shape": [6, 4], "dtype": "BF16"}],
  "tp_rules": [{"pattern": "*.q_proj.weight", "split": {"dim": 1}},
               {"pattern": "lm_head.weight", "split": "replicate"}]
})";

TEST(SkeletonTpRulesTest, ParsedWrittenBackAndUsedByTheTpStrategy) {
  absl::StatusOr<Skeleton> s = ParseSkeletonJson(kSkeletonWithRules, "model.json");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->tp_rules.size(), 2u);
  EXPECT_EQ(s->tp_rules[0].split, "dim");
  EXPECT_EQ(s->tp_rules[0].dim, 1);
  absl::StatusOr<Skeleton> again = ParseSkeletonJson(SkeletonToJson(*s), "again.json");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(SkeletonToJson(*again), SkeletonToJson(*s));

  absl::StatusOr<Plan> plan = testing::PlanOnGpus(*s, "tp", 2, 1 << 30, /*tp=*/2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(ValidatePlan(*plan, *s).ok()) << ValidatePlan(*plan, *s);
  EXPECT_EQ(*plan->ranks[1].items[0].slice, (TensorSlice{1, 3, 3}));
  EXPECT_FALSE(plan->ranks[1].items[1].slice.has_value());
}

void ExpectRefused(const std::string& from, const std::string& to, const std::string& message) {
  const std::string text = absl::StrReplaceAll(kSkeletonWithRules, {{from, to}});
  absl::StatusOr<Skeleton> s = ParseSkeletonJson(text, "model.json");
  ASSERT_FALSE(s.ok()) << text;
  EXPECT_THAT(std::string(s.status().message()), HasSubstr(message));
}

TEST(SkeletonTpRulesTest, UnknownSplitIsRefused) {
  ExpectRefused("\"replicate\"", "\"diagonal\"", "tp_rules[1]: field \"split\": \"diagonal\" is not");
}

TEST(SkeletonTpRulesTest, UnknownKeyIsRefused) {
  ExpectRefused("\"split\": \"replicate\"", "\"split\": \"replicate\", \"why\": 1", "why");
}

TEST(SkeletonTpRulesTest, NegativeDimIsRefused) {
  ExpectRefused("{\"dim\": 1}", "{\"dim\": -1}", "dim -1 is out of range");
}

TEST(SkeletonTpRulesTest, SplitOfTheWrongTypeIsRefused) {
  ExpectRefused("{\"dim\": 1}", "1", "field \"split\" must be");
}

TEST(SkeletonTpRulesTest, EmptyPatternIsRefused) {
  ExpectRefused("\"lm_head.weight\", \"split\"", "\"\", \"split\"", "field \"pattern\" is empty");
}

}  // namespace
}  // namespace metaload
