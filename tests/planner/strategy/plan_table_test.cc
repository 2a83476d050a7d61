// The plan table (docs/cli.md): one row per rank, and the words each strategy's record gives
// its title and its ranks.
#include "planner/strategy/plan_table.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaload {
namespace {

using ::testing::HasSubstr;

TEST(PlanTableTest, OneRowPerRankWithUnitsRange) {
  Plan plan;
  plan.model = "tiny";
  plan.strategy = "layers";
  plan.world_size = 3;
  plan.ranks = {
      RankPlan{0, "node0", 0, 64, 1024, {"emb"}, {ReadItem{"emb.weight", DType::kBF16, {8, 4}, 64}}},
      RankPlan{1,
               "node0",
               1,
               32,
               1024,
               {"model.layers.0", "model.layers.1", "model.layers.7"},
               {ReadItem{"rope.inv_freq", DType::kF32, {8}, 32}}},
      RankPlan{2, "node1", 0, 0, 0, {}, {}}};
  const std::string table = PlanToTable(plan);
  EXPECT_EQ(
      table,
      "plan for tiny: strategy layers, 3 ranks, 96 B\n"
      "rank  node   gpu  bytes  % budget  holds      units\n"
      "   0  node0    0   64 B      6.2%  1 tensor   emb (1 unit)\n"
      "   1  node0    1   32 B      3.1%  1 tensor   model.layers.0 \xE2\x80\xA6 model.layers.7 (3 units)\n"
      "   2  node1    0    0 B         -  0 tensors  -\n");
}

// A hand-made sliced plan: `world` ranks each holding one whole item and `sliced` slices.
Plan SlicedPlan(const std::string& strategy, int world, int group_size, int replicas, int sliced) {
  Plan plan;
  plan.model = "m";
  plan.strategy = strategy;
  plan.world_size = world;
  plan.group_size = group_size;
  plan.replicas = replicas;
  for (int r = 0; r < world; ++r) {
    RankPlan rank;
    rank.rank = r;
    rank.node = "n";
    rank.gpu = r;
    rank.budget_bytes = 1000;
    rank.items.push_back(ReadItem{"norm.weight", DType::kBF16, {4}, 8});
    for (int i = 0; i < sliced; ++i) {
      ReadItem item{"w", DType::kBF16, {8, 4}, 32};
      item.slice = TensorSlice{0, 0, 4};
      item.to_dtype = DType::kF32;
      rank.items.push_back(item);
    }
    for (const ReadItem& item : rank.items) rank.size_bytes += item.size_bytes;
    plan.ranks.push_back(rank);
  }
  return plan;
}

TEST(PlanTableTest, TpRowsSayReplicaStageAndTpIndexAndTheHeaderTheShape) {
  Plan plan = SlicedPlan("tp", 8, 2, 2, 3);
  for (RankPlan& rank : plan.ranks) rank.units = {rank.rank / 2 % 2 == 0 ? "model.embed_tokens" : "lm_head"};
  const std::string table = PlanToTable(plan);
  EXPECT_THAT(table,
              HasSubstr("plan for m: strategy tp (tp 2 \xC3\x97 pp 2 \xC3\x97 2 replicas), 8 ranks, 832 B, "
                        "converted to F32 on load\n"));
  EXPECT_THAT(
      table, HasSubstr("   0  n       0  104 B     10.4%  replica 1/2, stage 1/2, tp 1/2: 3 sliced, 1 whole  "
                       "model.embed_tokens (1 unit)\n"));
  EXPECT_THAT(
      table, HasSubstr("   7  n       7  104 B     10.4%  replica 2/2, stage 2/2, tp 2/2: 3 sliced, 1 whole  "
                       "lm_head (1 unit)\n"));
  // One replica, one stage: only the tp index.
  EXPECT_THAT(PlanToTable(SlicedPlan("tp", 2, 2, 1, 1)), HasSubstr("tp 2/2: 1 sliced, 1 whole  -\n"));
  EXPECT_THAT(PlanToTable(SlicedPlan("tp", 2, 2, 1, 1)),
              HasSubstr("strategy tp (tp 2 \xC3\x97 pp 1), 2 ranks"));
}

TEST(PlanTableTest, FsdpAndReplicateRowsSummarizeSlicesWithoutUnits) {
  const std::string fsdp = PlanToTable(SlicedPlan("fsdp", 4, 4, 1, 2));
  EXPECT_THAT(fsdp, HasSubstr("plan for m: strategy fsdp, 4 ranks, 288 B, converted to F32 on load\n"));
  EXPECT_THAT(fsdp,
              HasSubstr("   2  n       2   72 B      7.2%  dim-0 chunk 3/4 of 2 tensors, 1 whole  -\n"));
  const std::string replicate = PlanToTable(SlicedPlan("replicate", 2, 1, 2, 0));
  EXPECT_THAT(replicate, HasSubstr("plan for m: strategy replicate, 2 ranks, 16 B\n"));
  EXPECT_THAT(replicate, HasSubstr("   1  n       1    8 B      0.8%  all 1 tensor  -\n"));
}

}  // namespace
}  // namespace metaload
