// METALOAD_TEST_CORRUPT_CHUNKS: what the values mean, and which chunks each corrupts.
#include "tests/faults/chunk_fault.h"

#include <gtest/gtest.h>

namespace metaload {
namespace {

TEST(ChunkFaultTest, UnsetCorruptsNothing) {
  absl::StatusOr<ChunkFault> fault = ChunkFault::Parse("");
  ASSERT_TRUE(fault.ok()) << fault.status();
  EXPECT_FALSE(fault->active());
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(fault->CorruptNext());
}

TEST(ChunkFaultTest, NCorruptsOnlyTheNthChunkCountingFromOne) {
  absl::StatusOr<ChunkFault> fault = ChunkFault::Parse("3");
  ASSERT_TRUE(fault.ok()) << fault.status();
  EXPECT_EQ(fault->Describe(), "chunk number 3");
  std::vector<bool> corrupted;
  for (int i = 0; i < 6; ++i) corrupted.push_back(fault->CorruptNext());
  EXPECT_EQ(corrupted, (std::vector<bool>{false, false, true, false, false, false}));
}

TEST(ChunkFaultTest, AllCorruptsEveryChunk) {
  absl::StatusOr<ChunkFault> fault = ChunkFault::Parse("all");
  ASSERT_TRUE(fault.ok()) << fault.status();
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(fault->CorruptNext());
}

TEST(ChunkFaultTest, ZeroNegativeAndWordsAreInvalidArgumentNamingTheVariable) {
  for (const char* bad : {"0", "-1", "every", "1x", "ALL"}) {
    absl::StatusOr<ChunkFault> fault = ChunkFault::Parse(bad);
    ASSERT_FALSE(fault.ok()) << bad;
    EXPECT_EQ(fault.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(fault.status().message().find("METALOAD_TEST_CORRUPT_CHUNKS=\""), absl::string_view::npos)
        << fault.status();
  }
}

}  // namespace
}  // namespace metaload
