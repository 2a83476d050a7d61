// What every rank writes into the exchange and reads back (client/verify/rank_report.h).
#include "client/verify/rank_report.h"

#include <gtest/gtest.h>

#include <vector>

namespace metaload {
namespace {

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

TEST(RankReport, HeaderRoundTripsEveryField) {
  RankReport report;
  report.bad_tensor_count = 3;
  report.could_not_load = true;
  report.checked_count = 91;
  report.unproven_count = 2;
  report.plan_digest = std::string(64, 'f');
  report.plan_label = "tp 2 x pp 1, 4 ranks, to BF16";
  report.findings_cut = 7;
  report.has_digests = true;
  report.table_slots = 291;
  report.table_kind = 2;
  report.initialized_count = 8;
  report.computed_count = 64;
  std::vector<uint8_t> header(kHeaderBytes, 0);
  EncodeHeader(report, 1234, absl::MakeSpan(header));
  uint64_t details = 0;
  RankReport back = DecodeHeader(header, &details);
  EXPECT_EQ(details, 1234u);
  EXPECT_EQ(back.bad_tensor_count, 3);
  EXPECT_TRUE(back.could_not_load);
  EXPECT_EQ(back.checked_count, 91);
  EXPECT_EQ(back.unproven_count, 2);
  EXPECT_EQ(back.findings_cut, 7);
  EXPECT_TRUE(back.has_digests);
  EXPECT_EQ(back.table_slots, 291);
  EXPECT_EQ(back.table_kind, 2);
  EXPECT_EQ(back.initialized_count, 8);
  EXPECT_EQ(back.computed_count, 64);
  EXPECT_EQ(back.plan_digest, report.plan_digest);
  EXPECT_EQ(back.plan_label, report.plan_label);
}

TEST(RankReport, AnEmptyHeaderIsARankWithNothingToReport) {
  std::vector<uint8_t> header(kHeaderBytes, 0);
  uint64_t details = 99;
  RankReport back = DecodeHeader(header, &details);
  EXPECT_EQ(details, 0u);
  EXPECT_EQ(back.bad_tensor_count, 0);
  EXPECT_FALSE(back.could_not_load);
  EXPECT_FALSE(back.has_digests);
  EXPECT_TRUE(back.plan_digest.empty());
}

TEST(RankReport, DetailsRoundTripAnyBytesInNamesAndReasons) {
  RankReport report;
  // Names come from checkpoints: newlines, tabs, NULs and separators are just bytes.
  report.findings = {{"model.norm.weight", "still on meta"},
                     {std::string("odd\nname\t\0x", 11), "not filled: a: b"},
                     {"", "could not load: no plan"}};
  report.summary = {"layers 3-9 missing (7 tensors)"};
  int64_t cut = -1;
  const std::string details = EncodeDetails(report, 1 << 20, &cut);
  EXPECT_EQ(cut, 0);
  RankReport back;
  DecodeDetails(Bytes(details), &back);
  EXPECT_EQ(back.findings, report.findings);
  EXPECT_EQ(back.summary, report.summary);
}

TEST(RankReport, FindingsOverTheLimitAreCutAndCounted) {
  RankReport report;
  for (int i = 0; i < 1000; ++i)
    report.findings.push_back({"model.layers." + std::to_string(i) + ".w", "still on meta"});
  int64_t cut = 0;
  const std::string details = EncodeDetails(report, 4096, &cut);
  EXPECT_LE(details.size(), 4096u);
  RankReport back;
  DecodeDetails(Bytes(details), &back);
  ASSERT_GT(back.findings.size(), 10u);
  EXPECT_EQ(back.findings.front(), report.findings.front());
  EXPECT_EQ(static_cast<int64_t>(back.findings.size()) + cut, 1000);
}

TEST(RankReport, HostileDetailsAreReadUpToWhatMakesSense) {
  RankReport report;
  report.findings = {{"a", "b"}, {"c", "d"}};
  int64_t cut = 0;
  std::string details = EncodeDetails(report, 1 << 20, &cut);
  // A length that runs past the end: the findings before it stand, nothing after it is read.
  std::string truncated = details.substr(0, details.size() - 1);
  RankReport back;
  DecodeDetails(Bytes(truncated), &back);
  EXPECT_EQ(back.findings, (std::vector<Finding>{{"a", "b"}}));
  // A huge length (0xffffffff) allocates nothing.
  std::string huge = "F\xff\xff\xff\xff";
  RankReport none;
  DecodeDetails(Bytes(huge), &none);
  EXPECT_TRUE(none.findings.empty());
  // A kind no rank writes ends the reading.
  RankReport junk;
  DecodeDetails(Bytes(std::string("Zjunk") + details), &junk);
  EXPECT_TRUE(junk.findings.empty());
}

}  // namespace
}  // namespace metaload
