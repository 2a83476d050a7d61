// ShapeMismatchSummary: a skeleton of another variant (hidden size 16 against the checkpoint's
// 32) was 39 lines of findings with nothing saying what they share (issue 37); now one line says
// it first, and `check` and the refusal `register` gives show five findings, then a count.
#include "planner/doctor/shape_summary.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/doctor/check_report.h"
#include "planner/doctor/match.h"
#include "tests/planner/model_builders.h"
#include "util/error_kind.h"

namespace metaload {
namespace {

using ::metaload::testing::CheckpointFor;
using ::metaload::testing::LlamaLikeSkeleton;
using ::testing::HasSubstr;

constexpr char kSummary[] =
    "21 tensors differ in shape: 16 in the skeleton is 32 in the checkpoint (in 21), 32 is 64 (in 6): "
    "another "
    "variant of this model, hidden_size 16 vs the checkpoint's 32, intermediate_size 32 vs the checkpoint's "
    "64?";

MatchReport AnotherHiddenSize() {
  // The skeleton: hidden 16, intermediate 32; the checkpoint: hidden 32, intermediate 64.
  return MatchSkeleton(LlamaLikeSkeleton(2, 16, 32, 64), CheckpointFor(LlamaLikeSkeleton(2, 32, 64, 64)));
}

TEST(ShapeSummary, SaysHowManyWhichSizesAndTheLikelyConfigKey) {
  const MatchReport report = AnotherHiddenSize();
  ASSERT_EQ(report.shape_mismatches.size(), 21u);
  EXPECT_EQ(ShapeMismatchSummary(report.shape_mismatches), kSummary);
}

TEST(ShapeSummary, OneMismatchNeedsNoSummary) {
  MatchReport report = AnotherHiddenSize();
  report.shape_mismatches.resize(1);
  EXPECT_EQ(ShapeMismatchSummary(report.shape_mismatches), std::nullopt);
}

TEST(ShapeSummary, CheckSaysItFirstAndShowsFiveFindingsThenACount) {
  const std::string text = CheckReportToText(AnotherHiddenSize(), {"model.json", "/models/test", "m"});
  EXPECT_THAT(text, HasSubstr(absl::StrCat("\nwould stay on meta (21):\n  summary: ", kSummary, "\n")));
  EXPECT_THAT(text, HasSubstr("\n  and 16 more (--format json lists all)\n"));
  EXPECT_LE(static_cast<std::vector<std::string>>(absl::StrSplit(text, '\n')).size(), 20u) << text;
}

TEST(ShapeSummary, TheRefusalLeadsWithItAndNamesFiveFindings) {
  const absl::Status refused = MatchToStatus(AnotherHiddenSize(), "m");
  EXPECT_THAT(refused.message(),
              HasSubstr(absl::StrCat("model m: 21 tensors would stay on meta: ", kSummary, "; ")));
  EXPECT_THAT(refused.message(), HasSubstr("; and 16 more; fix: "));
  EXPECT_EQ(KindOf(refused), ErrorKind::kBadInput);  // refused before anything is read: exit 2, not 3
}

}  // namespace
}  // namespace metaload
