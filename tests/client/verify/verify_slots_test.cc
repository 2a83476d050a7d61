// The verification slot every rank writes and every rank reads back (client/verify/verify_slots.h).
#include "client/verify/verify_slots.h"

#include <gtest/gtest.h>

#include <vector>

namespace metaload {
namespace {

TEST(VerifySlots, RoundTripsEveryField) {
  RankReport report;
  report.bad_tensor_count = 3;
  report.could_not_load = true;
  report.plan_digest = std::string(64, 'f');
  report.plan_label = "tp 2 x pp 1, 4 ranks, to BF16";
  report.findings = {"model.norm.weight is still on meta", "lm_head.weight was not filled: gone"};
  report.has_digests = true;
  report.digest_matched_count = 24;
  report.digest_sliced_count = 8;
  report.digest_on_device_count = 2;
  std::vector<uint8_t> slot(kSlotBytes, 0);
  EncodeSlot(report, absl::MakeSpan(slot));
  RankReport back = DecodeSlot(slot);
  EXPECT_EQ(back.bad_tensor_count, 3);
  EXPECT_TRUE(back.could_not_load);
  EXPECT_TRUE(back.has_digests);
  EXPECT_EQ(back.digest_matched_count, 24);
  EXPECT_EQ(back.digest_sliced_count, 8);
  EXPECT_EQ(back.digest_on_device_count, 2);
  EXPECT_EQ(back.plan_digest, report.plan_digest);
  EXPECT_EQ(back.plan_label, report.plan_label);
  EXPECT_EQ(back.findings, report.findings);
}

TEST(VerifySlots, AnEmptySlotIsARankWithNothingToReport) {
  std::vector<uint8_t> slot(kSlotBytes, 0);
  RankReport back = DecodeSlot(slot);
  EXPECT_EQ(back.bad_tensor_count, 0);
  EXPECT_FALSE(back.could_not_load);
  EXPECT_FALSE(back.has_digests);
  EXPECT_EQ(back.digest_matched_count, 0);
  EXPECT_TRUE(back.plan_digest.empty());
  EXPECT_TRUE(back.findings.empty());
}

TEST(VerifySlots, TooManyFindingsAreCutSayingHowMany) {
  RankReport report;
  report.bad_tensor_count = 1000;
  for (int i = 0; i < 1000; ++i)
    report.findings.push_back("model.layers." + std::to_string(i) + ".w is still on meta");
  std::vector<uint8_t> slot(kSlotBytes, 0);
  EncodeSlot(report, absl::MakeSpan(slot));
  RankReport back = DecodeSlot(slot);
  EXPECT_EQ(back.bad_tensor_count, 1000) << "the count is exact even when the names are cut";
  ASSERT_GT(back.findings.size(), 10u);
  EXPECT_EQ(back.findings.front(), report.findings.front());
  const std::string& last = back.findings.back();
  EXPECT_EQ(last.rfind("... (", 0), 0u) << last;
  EXPECT_NE(last.find("more findings cut)"), std::string::npos) << last;
  EXPECT_EQ(std::stoul(last.substr(5)) + back.findings.size() - 1, 1000u);
}

TEST(VerifySlots, SlotsOfDifferentRanksSumToTheirConcatenation) {
  // The all-reduce sums byte-wise: with every other rank's slot zero, each slot survives.
  std::vector<uint8_t> a(2 * kSlotBytes, 0), b(2 * kSlotBytes, 0), sum(2 * kSlotBytes, 0);
  RankReport r0, r1;
  r0.plan_digest = "aa";
  r1.plan_digest = "bb";
  r1.bad_tensor_count = 2;
  EncodeSlot(r0, absl::MakeSpan(a.data(), kSlotBytes));
  EncodeSlot(r1, absl::MakeSpan(b.data() + kSlotBytes, kSlotBytes));
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = static_cast<uint8_t>(a[i] + b[i]);
  EXPECT_EQ(DecodeSlot(absl::MakeConstSpan(sum.data(), kSlotBytes)).plan_digest, "aa");
  EXPECT_EQ(DecodeSlot(absl::MakeConstSpan(sum.data() + kSlotBytes, kSlotBytes)).bad_tensor_count, 2);
}

TEST(VerifySlots, GarbageNeverReadsPastTheSlot) {
  std::vector<uint8_t> slot(kSlotBytes, 0x41);  // no NUL anywhere
  RankReport back = DecodeSlot(slot);
  EXPECT_EQ(back.plan_digest.size(), kDigestBytes);
  EXPECT_LE(back.plan_label.size(), kLabelBytes);
}

}  // namespace
}  // namespace metaload
