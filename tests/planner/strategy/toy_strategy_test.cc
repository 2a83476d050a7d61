// A strategy that exists only in this test: its record below, registered from the test, and
// nothing else. Planned through the entry points every strategy goes through (the flag parser
// and --help, MakePlan and its refusals, ValidatePlan, the plan table, labels, the options'
// key, the device map), it proves what planner/README.md says adding a strategy takes: one
// file with the record, and its line in the table (here: RegisterStrategy).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/strategy/fit.h"
#include "planner/strategy/hf_device_map.h"
#include "planner/strategy/plan_table.h"
#include "planner/strategy/strategy.h"
#include "planner/strategy/strategy_flags.h"
#include "planner/strategy/strategy_registry.h"
#include "tests/planner/model_builders.h"
#include "tests/planner/strategy/strategy_testing.h"

namespace metaload {
namespace {

using ::metaload::testing::LlamaLikeSkeleton;
using ::testing::HasSubstr;

// `last`: every tensor on the last rank, the others empty.
absl::Status PlanLast(const PlanRequest& request, const PlanSetup& setup, CompactPlan* plan, NoFit* no_fit) {
  for (size_t i = 0; i < plan->items.size(); ++i) plan->Add(plan->ranks.back(), i);
  return CheckBudgets(*plan, setup.budgets, "last holds the whole model on its last GPU", /*gpus_needed=*/0,
                      no_fit);
}

// When the last GPU is too small: every GPU, with layers.
void LastWouldFit(const PlanRequest& request, const NoFit& no_fit, std::vector<std::string>* fits) {
  const Strategy& layers = *FindStrategy("layers");
  if (PlanWithoutAdvice(layers, request, nullptr).ok())
    fits->push_back(absl::StrCat("--strategy ", layers.name));
}

std::string LastLabel(const StrategyOptions& options) { return "last (one rank)"; }

std::string LastHolds(const Plan& plan, const RankPlan& rank, size_t sliced, size_t whole) {
  return whole == 0 ? "nothing" : absl::StrCat("everything: ", DefaultHolds(sliced, whole));
}

const Strategy kLastStrategy = [] {
  Strategy s("last", "every tensor on the last rank", &PlanLast);
  s.would_fit = &LastWouldFit;
  s.label = &LastLabel;
  s.holds = &LastHolds;
  s.not_a_device_map = "leaves every GPU but one empty";
  return s;
}();

// Registered before any test runs, as the product's strategies are listed in the table.
const absl::Status kRegistered = RegisterStrategy(kLastStrategy);

TEST(ToyStrategyTest, IsRegisteredAfterTheBuiltInOnes) {
  ASSERT_TRUE(kRegistered.ok()) << kRegistered;
  EXPECT_EQ(Strategies().back(), &kLastStrategy);
  EXPECT_EQ(FindStrategy("last"), &kLastStrategy);
}

TEST(ToyStrategyTest, TheFlagParserTakesItAndHelpAndRefusalsListIt) {
  std::string help;
  absl::StatusOr<StrategyOptions> options = testing::ParsePlanFlags({"--strategy", "last"}, &help);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->strategy, "last");
  EXPECT_THAT(help, HasSubstr("replicate (every rank\n"));
  EXPECT_THAT(help, HasSubstr("holds everything), last (every tensor on the last rank)"));
  EXPECT_EQ(testing::ParsePlanFlags({"--strategy", "last", "--tp", "2"}).status().message(),
            "--tp is for --strategy tp (the strategy is last)");
  const Skeleton s = LlamaLikeSkeleton(2);
  EXPECT_EQ(testing::PlanOnGpus(s, "pipeline", 2).status().message(),
            "unknown strategy \"pipeline\" (supported: layers, tp, fsdp, replicate, last)");
}

TEST(ToyStrategyTest, MakePlanPlansItAndTheValidatorAcceptsIt) {
  const Skeleton s = LlamaLikeSkeleton(2);
  absl::StatusOr<Plan> plan = testing::PlanOnGpus(s, "last", 3);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->strategy, "last");
  EXPECT_TRUE(plan->ranks[0].items.empty());
  EXPECT_TRUE(plan->ranks[1].items.empty());
  EXPECT_EQ(plan->ranks[2].items.size(), s.tensors.size());
  EXPECT_TRUE(ValidatePlan(*plan, s).ok()) << ValidatePlan(*plan, s);
}

TEST(ToyStrategyTest, ItsRecordGivesTheTableLabelKeyAndDeviceMapWords) {
  const Skeleton s = LlamaLikeSkeleton(2);
  absl::StatusOr<Plan> plan = testing::PlanOnGpus(s, "last", 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::string table = PlanToTable(*plan);
  EXPECT_THAT(table, HasSubstr("plan for llama-test: strategy last, 2 ranks, "));
  EXPECT_THAT(table, HasSubstr("  nothing  "));
  EXPECT_THAT(table, HasSubstr("  everything: 21 tensors  "));
  StrategyOptions options;
  options.strategy = "last";
  EXPECT_EQ(StrategyLabel(options), "last (one rank)");
  EXPECT_EQ(StrategyOptionsKey(options), "last|tp=1|pp=0|reserve=0.1/0|dtype=-");
  EXPECT_EQ(
      HfDeviceMap(*plan, s).status().message(),
      "--format hf-device-map needs --strategy layers: transformers' device_map puts each module whole on "
      "one device, and a last plan leaves every GPU but one empty");
}

TEST(ToyStrategyTest, ARefusalSaysWhatWouldFitInItsOwnWords) {
  const Skeleton s = LlamaLikeSkeleton(2);  // 14,496 bytes, no unit over 5,184
  absl::StatusOr<Plan> plan =
      testing::PlanOnGpus(s, "last", 4, 8192);  // layers fits 4 GPUs, one GPU does not hold all
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("over; last holds the whole model on its last GPU"));
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("; would fit: --strategy layers or larger GPUs (--gpu-memory)"));
}

TEST(ToyStrategyTest, ANameOrFlagTakenAlreadyIsRefused) {
  EXPECT_EQ(RegisterStrategy(kLastStrategy).code(), absl::StatusCode::kAlreadyExists);
  static const StrategyFlag kTakenFlag[] = {{"tp", "T", "taken", &StrategyOptions::tp, 1, 8}};
  static const Strategy kClash = [] {
    Strategy s("clash", "takes tp's flag", &PlanLast);
    s.flags = kTakenFlag;
    return s;
  }();
  EXPECT_EQ(RegisterStrategy(kClash).message(), "strategy \"clash\": flag --tp is strategy tp's");
  static const Strategy kNoPlan("noplan", "cannot plan", nullptr);
  EXPECT_EQ(RegisterStrategy(kNoPlan).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FindStrategy("clash"), nullptr);
}

}  // namespace
}  // namespace metaload
