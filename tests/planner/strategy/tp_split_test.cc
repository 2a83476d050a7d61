// Tensor-parallel splits that respect attention heads (planner/strategy/strategies/tp_split.h): every rank
// holds whole query heads and whole key/value heads, key/value heads replicated when --tp exceeds them, fused
// layouts split only where that is correct, and the refusals users see.
#include "planner/strategy/strategies/tp_split.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/plan/slice.h"
#include "planner/strategy/strategy.h"
#include "tests/planner/model_builders.h"
#include "tests/planner/skeleton/hf_test_configs.h"
#include "tests/planner/strategy/strategy_testing.h"
#include "tests/test_support.h"
#include "util/units.h"

namespace metaload {
namespace {

using ::metaload::testing::FromJson;
using ::metaload::testing::TinyFalcon;
using ::metaload::testing::TinyLlama;
using ::metaload::testing::WithArchitecture;
using ::testing::HasSubstr;

absl::StatusOr<Plan> TpPlanOf(const Skeleton& s, int tp, int gpus = 0) {
  absl::StatusOr<Cluster> c = MakeUniformCluster(gpus == 0 ? tp : gpus, 0, 80 * kGiB);
  EXPECT_TRUE(c.ok()) << c.status();
  PlanRequest request;
  request.skeleton = &s;
  request.cluster = &*c;
  request.options.strategy = "tp";
  request.options.tp = tp;
  absl::StatusOr<Plan> plan = MakePlan(request);
  if (plan.ok()) {
    absl::Status valid = ValidatePlan(*plan, s);
    EXPECT_TRUE(valid.ok()) << valid;
  }
  return plan;
}

// Rank r's slice of `tensor` as {start, length} on `dim`; {-1, -1} when held whole.
std::vector<std::pair<int64_t, int64_t>> SlicesOf(const Plan& plan, const std::string& tensor, int dim) {
  std::vector<std::pair<int64_t, int64_t>> slices;
  for (const RankPlan& rank : plan.ranks) {
    const ReadItem* item = testing::FindItem(rank, tensor);
    EXPECT_NE(item, nullptr) << "rank " << rank.rank << " lacks " << tensor;
    if (item == nullptr || !item->slice.has_value()) {
      slices.emplace_back(-1, -1);
      continue;
    }
    EXPECT_EQ(item->slice->dim, dim) << tensor;
    EXPECT_EQ(item->size_bytes, SliceSizeBytes(item->shape, LoadDType(*item), item->slice)) << tensor;
    slices.emplace_back(item->slice->start, item->slice->length);
  }
  return slices;
}

void ExpectRefused(const absl::StatusOr<Plan>& plan, const std::string& message) {
  ASSERT_FALSE(plan.ok()) << "expected: " << message;
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << plan.status();
  EXPECT_EQ(std::string(plan.status().message()), message);
}

using Slices = std::vector<std::pair<int64_t, int64_t>>;

// The case: --tp 4 on 2 key/value heads of 32 gave each rank half a head. Qwen2 (q/k/v
// carry biases): 8 heads of 32, 2 key/value heads.
nlohmann::json TwoKvHeadsOf32() {
  nlohmann::json config = WithArchitecture(TinyLlama(), "Qwen2ForCausalLM");
  config["hidden_size"] = 256;
  config["num_attention_heads"] = 8;
  config["num_key_value_heads"] = 2;
  return config;
}

TEST(TpHeadsTest, TpAboveKeyValueHeadsReplicatesEachOnTheRanksThatShareIt) {
  const Skeleton s = FromJson(TwoKvHeadsOf32());
  absl::StatusOr<Plan> plan = TpPlanOf(s, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::string attn = "model.layers.0.self_attn.";
  // Ranks 0 and 1 hold key/value head 0, ranks 2 and 3 head 1: whole heads of 32 rows.
  const Slices kv = {{0, 32}, {0, 32}, {32, 32}, {32, 32}};
  EXPECT_EQ(SlicesOf(*plan, attn + "k_proj.weight", 0), kv);
  EXPECT_EQ(SlicesOf(*plan, attn + "v_proj.weight", 0), kv);
  EXPECT_EQ(SlicesOf(*plan, attn + "k_proj.bias", 0), kv);
  // Query heads: 2 each, and o_proj's matching columns.
  const Slices q = {{0, 64}, {64, 64}, {128, 64}, {192, 64}};
  EXPECT_EQ(SlicesOf(*plan, attn + "q_proj.weight", 0), q);
  EXPECT_EQ(SlicesOf(*plan, attn + "q_proj.bias", 0), q);
  EXPECT_EQ(SlicesOf(*plan, attn + "o_proj.weight", 1), q);
  // Bytes count the real slices: a key/value head is 32 x 256 BF16.
  EXPECT_EQ(testing::FindItem(plan->ranks[3], attn + "k_proj.weight")->size_bytes, 32u * 256 * 2);
}

TEST(TpHeadsTest, GroupedQueryAttentionGivesEachRankItsHeadsAtEveryTp) {
  // 8 heads of 8, 4 key/value heads: --tp 2 and 4 split key/value heads, --tp 8 replicates them.
  nlohmann::json config = TinyLlama();
  config["num_attention_heads"] = 8;
  config["num_key_value_heads"] = 4;
  const Skeleton s = FromJson(config);
  const std::string k = "model.layers.1.self_attn.k_proj.weight";
  absl::StatusOr<Plan> tp2 = TpPlanOf(s, 2);
  ASSERT_TRUE(tp2.ok()) << tp2.status();
  EXPECT_EQ(SlicesOf(*tp2, k, 0), (Slices{{0, 16}, {16, 16}}));
  absl::StatusOr<Plan> tp4 = TpPlanOf(s, 4);
  ASSERT_TRUE(tp4.ok()) << tp4.status();
  EXPECT_EQ(SlicesOf(*tp4, k, 0), (Slices{{0, 8}, {8, 8}, {16, 8}, {24, 8}}));
  absl::StatusOr<Plan> tp8 = TpPlanOf(s, 8);
  ASSERT_TRUE(tp8.ok()) << tp8.status();
  EXPECT_EQ(SlicesOf(*tp8, k, 0),
            (Slices{{0, 8}, {0, 8}, {8, 8}, {8, 8}, {16, 8}, {16, 8}, {24, 8}, {24, 8}}));
  EXPECT_EQ(SlicesOf(*tp8, "model.layers.1.self_attn.q_proj.weight", 0)[7],
            (std::pair<int64_t, int64_t>{56, 8}));
}

TEST(TpHeadsTest, MultiQueryKeyValueHeadIsWholeOnEveryRank) {
  // Gemma-2B: 8 heads of 256 sharing one key/value head.
  METALOAD_REQUIRE_FIXTURES(fixtures);
  absl::StatusOr<Skeleton> s = SkeletonFromHfConfigFile(fixtures + "/hf/gemma-2b-it/config.json");
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<Plan> plan = TpPlanOf(*s, 8);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::string attn = "model.layers.17.self_attn.";
  EXPECT_EQ(SlicesOf(*plan, attn + "k_proj.weight", 0), Slices(8, {-1, -1}));
  EXPECT_EQ(SlicesOf(*plan, attn + "v_proj.weight", 0), Slices(8, {-1, -1}));
  EXPECT_EQ(SlicesOf(*plan, attn + "q_proj.weight", 0)[5], (std::pair<int64_t, int64_t>{5 * 256, 256}));
  EXPECT_EQ(SlicesOf(*plan, attn + "o_proj.weight", 1)[5], (std::pair<int64_t, int64_t>{5 * 256, 256}));
}

TEST(TpHeadsTest, QueryHeadsThatDoNotDivideByTpAreRefusedNamingTheTensor) {
  // 6 heads of 8: the 48 rows divide by 4, the heads do not.
  nlohmann::json config = TinyLlama();
  config["hidden_size"] = 48;
  config["num_attention_heads"] = 6;
  config["num_key_value_heads"] = 6;
  config["intermediate_size"] = 64;
  ExpectRefused(
      TpPlanOf(FromJson(config), 4),
      "tensor model.layers.0.self_attn.q_proj.weight [48, 48]: its 6 attention heads do not divide by "
      "--tp 4 (each rank of a tensor-parallel group holds whole heads)");
}

TEST(TpHeadsTest, KeyValueHeadsNeitherDividingNorDividedByTpAreRefusedNamingTheTensor) {
  // 12 heads of 8 divide by 2; 3 key/value heads (24 rows, which do) neither divide by 2 nor 2 by them.
  nlohmann::json config = TinyLlama();
  config["hidden_size"] = 96;
  config["num_attention_heads"] = 12;
  config["num_key_value_heads"] = 3;
  ExpectRefused(
      TpPlanOf(FromJson(config), 2),
      "tensor model.layers.0.self_attn.k_proj.weight [24, 96]: its 3 key/value heads (for 12 attention "
      "heads) do not divide by --tp 2, nor --tp 2 by them (each rank holds whole key/value heads, or one "
      "replicated on --tp / 3 ranks)");
}

TEST(TpHeadsTest, FalconGroupedQkvSplitsOnGroupBoundariesOnly) {
  // New decoder: 8 heads of 8 in 4 groups of [2 q, k, v]: 4 x 4 x 8 = 128 rows.
  nlohmann::json config = TinyFalcon();
  config["num_attention_heads"] = 8;
  config["new_decoder_architecture"] = true;
  config["num_kv_heads"] = 4;
  const Skeleton s = FromJson(config);
  const std::string qkv = "transformer.h.0.self_attention.query_key_value.weight";
  absl::StatusOr<Plan> tp4 = TpPlanOf(s, 4);
  ASSERT_TRUE(tp4.ok()) << tp4.status();
  EXPECT_EQ(SlicesOf(*tp4, qkv, 0), (Slices{{0, 32}, {32, 32}, {64, 32}, {96, 32}}));
  EXPECT_EQ(SlicesOf(*tp4, "transformer.h.0.self_attention.dense.weight", 1)[1],
            (std::pair<int64_t, int64_t>{16, 16}));
  // 16 rows each would divide, but cut groups apart.
  ExpectRefused(
      TpPlanOf(s, 8),
      "tensor transformer.h.0.self_attention.query_key_value.weight [128, 64]: its 4 groups (each 2 "
      "query heads then its key and value head) do not divide by --tp 8, and a contiguous slice per "
      "rank must hold whole groups; if your runtime replicates it, add {\"pattern\": "
      "\"*.query_key_value.*\", \"split\": \"replicate\"} to \"tp_rules\" in model.json");
}

TEST(TpHeadsTest, FalconOldLayoutsSplitPerHeadOrNotAtAll) {
  // multi_query false: [q, k, v] per head, so whole heads are whole groups.
  nlohmann::json config = TinyFalcon();
  config["multi_query"] = false;
  absl::StatusOr<Plan> per_head = TpPlanOf(FromJson(config), 2);
  ASSERT_TRUE(per_head.ok()) << per_head.status();
  EXPECT_EQ(SlicesOf(*per_head, "transformer.h.1.self_attention.query_key_value.weight", 0),
            (Slices{{0, 96}, {96, 96}}));
  // Multi-query (Falcon-7B): [all q; k; v], one group that no contiguous cut shares.
  ExpectRefused(
      TpPlanOf(FromJson(TinyFalcon()), 2),
      "tensor transformer.h.0.self_attention.query_key_value.weight [96, 64]: its 1 group (each 4 "
      "query heads then its key and value head) does not divide by --tp 2, and a contiguous slice per "
      "rank must hold whole groups; if your runtime replicates it, add {\"pattern\": "
      "\"*.query_key_value.*\", \"split\": \"replicate\"} to \"tp_rules\" in model.json");
}

TEST(TpHeadsTest, ConcatenatedLayoutsAreRefusedUntilATpRuleReplicatesThem) {
  Skeleton phi3 = FromJson(WithArchitecture(TinyLlama(), "Phi3ForCausalLM"));
  ExpectRefused(
      TpPlanOf(phi3, 2),
      "tensor model.layers.0.self_attn.qkv_proj.weight [128, 64]: dim 0 concatenates [q; k; v], and one "
      "contiguous slice per rank cannot hold matching pieces of each part, so --tp 2 cannot split it; if "
      "your runtime replicates it, add {\"pattern\": \"*.qkv_proj.*\", \"split\": \"replicate\"} to "
      "\"tp_rules\" in model.json");
  phi3.tp_rules.push_back(TpRule{"*.qkv_proj.*", "replicate", 0});
  ExpectRefused(
      TpPlanOf(phi3, 2),
      "tensor model.layers.0.mlp.gate_up_proj.weight [192, 64]: dim 0 concatenates [gate; up], and one "
      "contiguous slice per rank cannot hold matching pieces of each part, so --tp 2 cannot split it; if "
      "your runtime replicates it, add {\"pattern\": \"*.gate_up_proj.*\", \"split\": \"replicate\"} to "
      "\"tp_rules\" in model.json");
  phi3.tp_rules.push_back(TpRule{"*.gate_up_proj.*", "replicate", 0});
  absl::StatusOr<Plan> plan = TpPlanOf(phi3, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(SlicesOf(*plan, "model.layers.0.self_attn.qkv_proj.weight", 0), (Slices{{-1, -1}, {-1, -1}}));
  EXPECT_EQ(SlicesOf(*plan, "model.layers.0.self_attn.o_proj.weight", 1), (Slices{{0, 32}, {32, 32}}));

  // GPT-2's Conv1D c_attn is [in, q; k; v]: concatenated on dim 1, its bias on dim 0.
  const Skeleton gpt2 = FromJson({{"architectures", {"GPT2LMHeadModel"}},
                                  {"n_embd", 32},
                                  {"n_layer", 1},
                                  {"n_head", 4},
                                  {"vocab_size", 128}});
  ExpectRefused(
      TpPlanOf(gpt2, 2),
      "tensor transformer.h.0.attn.c_attn.weight [32, 96]: dim 1 concatenates [q; k; v], and one "
      "contiguous slice per rank cannot hold matching pieces of each part, so --tp 2 cannot split it; if "
      "your runtime replicates it, add {\"pattern\": \"*.c_attn.*\", \"split\": \"replicate\"} to "
      "\"tp_rules\" in model.json");
}

TEST(TpHeadsTest, WithoutAttentionGeometryHeadSplitsAreRefusedUnlessARuleDecides) {
  Skeleton s = testing::LlamaLikeSkeleton(1);
  s.attention.reset();  // as DeriveSkeleton leaves it
  ExpectRefused(
      TpPlanOf(s, 2),
      "tensor model.layers.0.self_attn.q_proj.weight [16, 16]: --tp 2 would split its attention heads, "
      "but the skeleton does not say how many there are (a skeleton derived from a checkpoint does "
      "not); build the skeleton from the model's config.json (metactl skeleton config.json) or add "
      "\"attention\": {\"heads\": H, \"kv_heads\": K, \"head_dim\": D} to model.json");
  // The skeleton's own rules still win: the user vouches for them.
  s.tp_rules.push_back(TpRule{"*.self_attn.*", "column", 0});
  absl::StatusOr<Plan> plan = TpPlanOf(s, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(SlicesOf(*plan, "model.layers.0.self_attn.o_proj.weight", 0), (Slices{{0, 8}, {8, 8}}));
}

// Dims without heads split into torch.chunk's pieces whether or not they divide: the split is
// {dim, tp}, and the pieces are ChunkSlice's. A skeleton's own rules split the same way.
TEST(TpHeadsTest, DimsWithoutHeadsSplitUnevenlyWhenTheyDoNotDivide) {
  const Skeleton llama = testing::LlamaLikeSkeleton(1);
  absl::StatusOr<TensorSplit> vocab = TpSplitFor(llama, "model.embed_tokens.weight", {32002, 16}, 4);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ(vocab->dim, 0);
  EXPECT_EQ(vocab->parts, 4);
  absl::StatusOr<TensorSplit> down = TpSplitFor(llama, "model.layers.0.mlp.down_proj.weight", {16, 30}, 4);
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_EQ(down->dim, 1);
  EXPECT_EQ(down->parts, 4);

  Skeleton s = testing::LlamaLikeSkeleton(1);  // 4 heads: --tp 3 splits them only by the user's rule
  s.tp_rules.push_back(TpRule{"*.self_attn.*", "column", 0});
  absl::StatusOr<Plan> plan = TpPlanOf(s, 3);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(SlicesOf(*plan, "model.layers.0.self_attn.q_proj.weight", 0), (Slices{{0, 6}, {6, 6}, {12, 4}}));
  EXPECT_EQ(SlicesOf(*plan, "model.layers.0.mlp.gate_proj.weight", 0), (Slices{{0, 11}, {11, 11}, {22, 10}}));
  EXPECT_EQ(SlicesOf(*plan, "model.embed_tokens.weight", 0), (Slices{{0, 22}, {22, 22}, {44, 20}}));
}

TEST(TpHeadsTest, AttentionThatDisagreesWithTheTensorIsRefused) {
  Skeleton s = testing::LlamaLikeSkeleton(1);  // q_proj [16, 16]
  s.attention = AttentionGeometry{4, 4, 8};
  ExpectRefused(
      TpPlanOf(s, 2),
      "tensor model.layers.0.self_attn.q_proj.weight [16, 16]: dim 0 (16) is not what \"attention\" says "
      "it holds: 4 heads x 8 = 32");
}

TEST(TpHeadsTest, TpOneSplitsNothing) {
  absl::StatusOr<TensorSplit> split = TpSplitFor(FromJson(WithArchitecture(TinyLlama(), "Phi3ForCausalLM")),
                                                 "model.layers.0.self_attn.qkv_proj.weight", {128, 64}, 1);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->dim, kTpReplicate);
}

// ValidatePlan: each index covered the same number of times, by ranks of one group.
class ValidateReplicatedHeadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<Plan> plan = TpPlanOf(skeleton_, 4);
    ASSERT_TRUE(plan.ok()) << plan.status();
    plan_ = *plan;
  }
  ReadItem& K(int rank) {
    for (ReadItem& item : plan_.ranks[rank].items) {
      if (item.tensor == "model.layers.0.self_attn.k_proj.weight") return item;
    }
    ADD_FAILURE() << "no k_proj on rank " << rank;
    return plan_.ranks[rank].items[0];
  }
  void ExpectInvalid(const std::string& message) {
    absl::Status status = ValidatePlan(plan_, skeleton_);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_EQ(std::string(status.message()), message);
  }
  Skeleton skeleton_ = FromJson(TwoKvHeadsOf32());
  Plan plan_;
};

TEST_F(ValidateReplicatedHeadsTest, TwiceCoveredHeadsAreValid) {
  ASSERT_TRUE(K(0).slice.has_value());
  EXPECT_EQ(*K(0).slice, *K(1).slice);  // ranks 0 and 1 share key/value head 0
  absl::Status valid = ValidatePlan(plan_, skeleton_);
  EXPECT_TRUE(valid.ok()) << valid;
}

TEST_F(ValidateReplicatedHeadsTest, UnevenCoverageNamesTheRanks) {
  K(2).slice->start = 0;  // head 0 on ranks 0, 1, 2; head 1 on rank 3 only
  ExpectInvalid(
      "tensor model.layers.0.self_attn.k_proj.weight [64, 256]: dim 0 [32, 64) is held by 1 rank (3) "
      "but [0, 32) by 3");
  K(2).slice->start = 32;
  K(1).slice->start = 32;  // head 0 on rank 0 only; head 1 on ranks 1, 2, 3
  ExpectInvalid(
      "tensor model.layers.0.self_attn.k_proj.weight [64, 256]: rank 3 holds dim 0 [32, 64), "
      "overlapping the slice before it at 32");
}

TEST_F(ValidateReplicatedHeadsTest, ARankHoldingATensorTwiceIsRefused) {
  ReadItem copy = K(1);
  copy.slice->start = 32;
  plan_.ranks[1].items.push_back(copy);
  plan_.ranks[1].size_bytes += copy.size_bytes;
  ExpectInvalid(
      "tensor model.layers.0.self_attn.k_proj.weight is assigned to rank 1 twice (dim 0 [0, 32) and "
      "dim 0 [32, 64))");
}

}  // namespace
}  // namespace metaload
