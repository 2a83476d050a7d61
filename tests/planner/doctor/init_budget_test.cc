// The init budget's boundaries (exactly a tenth, exactly half, one over each, nothing counted,
// counts near 2^64) and the refusals each surface reads.
#include "planner/doctor/init_budget.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace metaload {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using V = InitBudgetVerdict;

TEST(InitBudgetTest, CatchAllMayInitializeUpToATenthAndNoMore) {
  EXPECT_EQ(JudgeInitBudget(10, 100, InitScope::kCatchAll), V::kAllowed);
  EXPECT_EQ(JudgeInitBudget(11, 100, InitScope::kCatchAll), V::kCatchAllOverATenth);
  EXPECT_EQ(JudgeInitBudget(1, 10, InitScope::kCatchAll), V::kAllowed);
  EXPECT_EQ(JudgeInitBudget(2, 19, InitScope::kCatchAll), V::kCatchAllOverATenth);  // 10.5 %
  EXPECT_EQ(JudgeInitBudget(1, 9, InitScope::kCatchAll), V::kCatchAllOverATenth);   // 11 %
  // Named policies have no tenth: up to half.
  EXPECT_EQ(JudgeInitBudget(11, 100, InitScope::kNamed), V::kAllowed);
}

TEST(InitBudgetTest, NoPolicyMayInitializeMoreThanHalf) {
  for (const InitScope scope : {InitScope::kCatchAll, InitScope::kNamed}) {
    EXPECT_EQ(JudgeInitBudget(51, 100, scope), V::kMostOfTheModel);
    EXPECT_EQ(JudgeInitBudget(6, 11, scope), V::kMostOfTheModel);
    EXPECT_EQ(JudgeInitBudget(1, 1, scope), V::kMostOfTheModel);
    EXPECT_EQ(JudgeInitBudget(101, 100, scope), V::kMostOfTheModel);  // a caller's miscount: refused
  }
  EXPECT_EQ(JudgeInitBudget(50, 100, InitScope::kNamed), V::kAllowed);
  EXPECT_EQ(JudgeInitBudget(5, 11, InitScope::kNamed), V::kAllowed);
  EXPECT_EQ(JudgeInitBudget(50, 100, InitScope::kCatchAll), V::kCatchAllOverATenth);
}

TEST(InitBudgetTest, NothingToInitializeIsAlwaysAllowedAndAnEmptyModelHasNoBudget) {
  EXPECT_EQ(JudgeInitBudget(0, 0, InitScope::kCatchAll), V::kAllowed);
  EXPECT_EQ(JudgeInitBudget(0, 7, InitScope::kCatchAll), V::kAllowed);
  EXPECT_EQ(JudgeInitBudget(1, 0, InitScope::kNamed), V::kMostOfTheModel);
}

TEST(InitBudgetTest, HugeCountsDoNotOverflow) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();  // odd: max / 2 rounds down
  EXPECT_EQ(JudgeInitBudget(kMax / 2, kMax, InitScope::kNamed), V::kAllowed);
  EXPECT_EQ(JudgeInitBudget(kMax / 2 + 1, kMax, InitScope::kNamed), V::kMostOfTheModel);
  EXPECT_EQ(JudgeInitBudget(kMax / 10, kMax, InitScope::kCatchAll), V::kAllowed);
  EXPECT_EQ(JudgeInitBudget(kMax / 10 + 1, kMax, InitScope::kCatchAll), V::kCatchAllOverATenth);
  EXPECT_EQ(JudgeInitBudget(kMax, kMax, InitScope::kCatchAll), V::kMostOfTheModel);
}

TEST(InitBudgetTest, MetactlRefusalsNameTheFlagAndLeaveTheNamesToTheCaller) {
  const InitBudgetWords words{InitSurface::kMetactl, "zeros", "score.weight"};
  EXPECT_EQ(InitBudgetRefusal(V::kAllowed, 1, 100, words), "");
  EXPECT_EQ(
      InitBudgetRefusal(V::kMostOfTheModel, 39, 39, words),
      "--init-missing zeros would initialize 39 of the skeleton's 39 tensors, most of the model: refused; "
      "what the checkpoint lacks is the real problem:");
  const std::string tenth = InitBudgetRefusal(V::kCatchAllOverATenth, 3, 24, words);
  EXPECT_THAT(tenth,
              StartsWith("--init-missing zeros applies to a few missing tensors only (at most a tenth of "
                         "the skeleton's: a new head, say), here 3 of the skeleton's 24: refused; "));
  EXPECT_THAT(tenth, HasSubstr("init_missing={\"score.weight\": \"zeros\"}"));
  EXPECT_THAT(tenth, EndsWith("what the checkpoint lacks:"));
}

TEST(InitBudgetTest, PythonRefusalsNameTheKeywordAndTheFixByName) {
  const InitBudgetWords words{InitSurface::kPython, "normal:0.02", "model.layers.2.mlp.up_proj.weight"};
  EXPECT_EQ(InitBudgetRefusal(V::kMostOfTheModel, 7, 10, words),
            "init_missing would initialize 7 of the module's 10 tensors, most of the model: refused; "
            "what the checkpoint lacks is the real problem:");
  EXPECT_EQ(
      InitBudgetRefusal(V::kCatchAllOverATenth, 9, 30, words),
      "init_missing=\"normal:0.02\" applies to a few missing tensors only, here 9 of the module's 30: name "
      "them, or a pattern, as init_missing={\"model.layers.2.mlp.up_proj.weight\": \"normal:0.02\"}");
}

}  // namespace
}  // namespace metaload
