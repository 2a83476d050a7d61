// Plan JSON (stable contract): golden bytes, round trip, determinism, strict parsing. (The
// table view is the strategies': tests/planner/strategy/plan_table_test.cc.)
#include "planner/plan/plan.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaload {
namespace {

using ::testing::HasSubstr;

// Two ranks: one with a checkpoint-backed item and one without a file, one empty rank.
Plan SmallPlan() {
  Plan plan;
  plan.model = "tiny";
  plan.strategy = "layers";
  plan.world_size = 3;
  RankPlan r0;
  r0.rank = 0;
  r0.node = "node0";
  r0.gpu = 0;
  r0.size_bytes = 64;
  r0.budget_bytes = 1024;
  r0.units = {"emb"};
  r0.items.push_back(ReadItem{"emb.weight", DType::kBF16, {8, 4}, 64, "model.safetensors", 80, 144});
  RankPlan r1;
  r1.rank = 1;
  r1.node = "node0";
  r1.gpu = 1;
  r1.size_bytes = 32;
  r1.budget_bytes = 1024;
  r1.units = {"rope", "head"};
  r1.items.push_back(ReadItem{"rope.inv_freq", DType::kF32, {8}, 32, "", 0, 0});
  RankPlan r2;
  r2.rank = 2;
  r2.node = "node1";
  r2.gpu = 0;
  plan.ranks = {r0, r1, r2};
  return plan;
}

constexpr char kSmallPlanJson[] =
    "{\n"
    "  \"model\": \"tiny\",\n"
    "  \"strategy\": \"layers\",\n"
    "  \"world_size\": 3,\n"
    "  \"ranks\": [\n"
    "    {\n"
    "      \"rank\": 0,\n"
    "      \"node\": \"node0\",\n"
    "      \"gpu\": 0,\n"
    "      \"bytes\": 64,\n"
    "      \"budget\": 1024,\n"
    "      \"units\": [\"emb\"],\n"
    "      \"items\": [\n"
    "        {\"tensor\": \"emb.weight\", \"dtype\": \"BF16\", \"shape\": [8, 4], \"bytes\": 64, "
    "\"file\": \"model.safetensors\", \"offsets\": [80, 144]}\n"
    "      ]\n"
    "    },\n"
    "    {\n"
    "      \"rank\": 1,\n"
    "      \"node\": \"node0\",\n"
    "      \"gpu\": 1,\n"
    "      \"bytes\": 32,\n"
    "      \"budget\": 1024,\n"
    "      \"units\": [\"rope\", \"head\"],\n"
    "      \"items\": [\n"
    "        {\"tensor\": \"rope.inv_freq\", \"dtype\": \"F32\", \"shape\": [8], \"bytes\": 32}\n"
    "      ]\n"
    "    },\n"
    "    {\n"
    "      \"rank\": 2,\n"
    "      \"node\": \"node1\",\n"
    "      \"gpu\": 0,\n"
    "      \"bytes\": 0,\n"
    "      \"budget\": 0,\n"
    "      \"units\": [],\n"
    "      \"items\": []\n"
    "    }\n"
    "  ]\n"
    "}\n";

void ExpectInvalid(const std::string& text, const std::string& substring) {
  absl::StatusOr<Plan> plan = PlanFromJson(text);
  ASSERT_FALSE(plan.ok()) << "expected an error containing: " << substring;
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr(substring));
}

// kSmallPlanJson with one substring replaced (which must be present).
std::string Edited(const std::string& from, const std::string& to) {
  std::string text = kSmallPlanJson;
  EXPECT_NE(text.find(from), std::string::npos) << from;
  return absl::StrReplaceAll(text, {{from, to}});
}

TEST(PlanJsonTest, MatchesGoldenBytes) { EXPECT_EQ(PlanToJson(SmallPlan()), kSmallPlanJson); }

TEST(PlanJsonTest, RoundTripKeepsEveryField) {
  absl::StatusOr<Plan> parsed = PlanFromJson(kSmallPlanJson);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const Plan expected = SmallPlan();
  EXPECT_EQ(parsed->model, expected.model);
  EXPECT_EQ(parsed->strategy, expected.strategy);
  EXPECT_EQ(parsed->world_size, expected.world_size);
  ASSERT_EQ(parsed->ranks.size(), 3u);
  for (size_t r = 0; r < 3; ++r) {
    const RankPlan& a = parsed->ranks[r];
    const RankPlan& b = expected.ranks[r];
    EXPECT_EQ(a.rank, b.rank);
    EXPECT_EQ(a.node, b.node);
    EXPECT_EQ(a.gpu, b.gpu);
    EXPECT_EQ(a.size_bytes, b.size_bytes);
    EXPECT_EQ(a.budget_bytes, b.budget_bytes);
    EXPECT_EQ(a.units, b.units);
    ASSERT_EQ(a.items.size(), b.items.size());
    for (size_t i = 0; i < a.items.size(); ++i) {
      EXPECT_EQ(a.items[i].tensor, b.items[i].tensor);
      EXPECT_EQ(a.items[i].dtype, b.items[i].dtype);
      EXPECT_EQ(a.items[i].shape, b.items[i].shape);
      EXPECT_EQ(a.items[i].size_bytes, b.items[i].size_bytes);
      EXPECT_EQ(a.items[i].file, b.items[i].file);
      EXPECT_EQ(a.items[i].begin_offset, b.items[i].begin_offset);
      EXPECT_EQ(a.items[i].end_offset, b.items[i].end_offset);
    }
  }
  EXPECT_EQ(PlanToJson(*parsed), kSmallPlanJson);
}

TEST(PlanJsonTest, EqualPlansGiveIdenticalBytes) {
  EXPECT_EQ(PlanToJson(SmallPlan()), PlanToJson(SmallPlan()));
  Plan other = SmallPlan();
  other.ranks[0].items[0].end_offset += 1;
  EXPECT_NE(PlanToJson(other), PlanToJson(SmallPlan()));
}

TEST(PlanJsonTest, EscapesStrings) {
  Plan plan;
  plan.model = "a \"quoted\"\nname";
  const std::string json = PlanToJson(plan);
  EXPECT_THAT(json, HasSubstr("\"model\": \"a \\\"quoted\\\"\\nname\""));
  EXPECT_THAT(json, HasSubstr("\"ranks\": []\n"));
  absl::StatusOr<Plan> parsed = PlanFromJson(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->model, plan.model);
}

TEST(PlanJsonTest, RejectsInvalidJson) { ExpectInvalid("{", "plan: invalid JSON"); }

TEST(PlanJsonTest, RejectsUnknownKey) {
  ExpectInvalid(Edited("\"world_size\": 3,", "\"world_size\": 3, \"extra\": 1,"),
                "plan: unknown field \"extra\"");
}

TEST(PlanJsonTest, RejectsMissingKey) {
  ExpectInvalid(Edited("      \"budget\": 0,\n", ""), "plan: ranks[2]: missing field \"budget\"");
}

TEST(PlanJsonTest, RejectsWorldSizeDifferentFromRankCount) {
  ExpectInvalid(Edited("\"world_size\": 3", "\"world_size\": 4"),
                "\"world_size\" is 4 but \"ranks\" lists 3 ranks");
}

// group_size x replicas wrapped an int to 0, and printing a tp plan's table then divided the
// world by it (SIGFPE); a plan from a file is bounded when read.
TEST(PlanJsonTest, RejectsGroupsAndReplicasBeyondTheWorld) {
  const std::string text =
      Edited("\"world_size\": 3,", "\"world_size\": 3, \"group_size\": 65536, \"replicas\": 65536,");
  ExpectInvalid(text, "plan: \"group_size\" 65536 x \"replicas\" 65536 is more than the world size 3");
  ExpectInvalid(Edited("\"world_size\": 3,", "\"world_size\": 3, \"group_size\": 4,"),
                "\"group_size\" 4 x \"replicas\" 1 is more than the world size 3");
}

TEST(PlanJsonTest, RejectsRanksOutOfOrder) {
  ExpectInvalid(Edited("\"rank\": 1,", "\"rank\": 2,"), "ranks[1]: field \"rank\" is 2");
}

TEST(PlanJsonTest, RejectsNegativeBytes) {
  ExpectInvalid(Edited("\"bytes\": 32,", "\"bytes\": -32,"), "ranks[1]: field \"bytes\": -32 is negative");
}

TEST(PlanJsonTest, RejectsFileWithoutOffsets) {
  ExpectInvalid(Edited(", \"offsets\": [80, 144]", ""),
                "ranks[0].items[0]: \"file\" and \"offsets\" come together");
}

TEST(PlanJsonTest, RejectsReversedOffsets) {
  ExpectInvalid(Edited("[80, 144]", "[144, 80]"),
                "ranks[0].items[0]: field \"offsets\": begin 144 is after end 80");
}

TEST(PlanJsonTest, RejectsMalformedOffsets) {
  ExpectInvalid(Edited("[80, 144]", "[80]"), "field \"offsets\": expected [begin, end]");
}

TEST(PlanJsonTest, RejectsUnknownDtype) {
  ExpectInvalid(Edited("\"F32\"", "\"F31\""), "ranks[1].items[0]: field \"dtype\": unknown dtype \"F31\"");
}

}  // namespace
}  // namespace metaload
