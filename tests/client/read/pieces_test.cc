// How a rank cuts its reads into pieces (client/read/pieces.h): exact coverage, bounded size.
#include "client/read/pieces.h"

#include <gtest/gtest.h>

#include <vector>

namespace metaload {
namespace {

// Every byte of `runs`, in order, exactly once, from the pieces; no piece over the bound.
void ExpectExactCover(const StridedRuns& runs, const std::vector<Piece>& pieces, uint64_t piece_bytes) {
  uint64_t dest = 0;
  std::vector<uint64_t> offsets;
  for (const Piece& p : pieces) {
    EXPECT_LE(p.runs.total_bytes(), piece_bytes);
    EXPECT_EQ(p.dest_offset, dest);
    for (uint64_t r = 0; r < p.runs.run_count; ++r) {
      for (uint64_t b = 0; b < p.runs.run_bytes; ++b)
        offsets.push_back(p.runs.first_offset + r * p.runs.stride_bytes + b);
    }
    dest += p.runs.total_bytes();
  }
  ASSERT_EQ(offsets.size(), runs.total_bytes());
  size_t i = 0;
  for (uint64_t r = 0; r < runs.run_count; ++r) {
    for (uint64_t b = 0; b < runs.run_bytes; ++b, ++i)
      ASSERT_EQ(offsets[i], runs.first_offset + r * runs.stride_bytes + b);
  }
}

TEST(CutPieces, ContiguousRangeByBytes) {
  std::vector<Piece> pieces;
  const StridedRuns runs{100, 1000, 1000, 1};
  CutPieces(7, "/m/f", "", "", runs, &pieces, 256);
  ASSERT_EQ(pieces.size(), 4u);  // 256 + 256 + 256 + 232
  EXPECT_EQ(pieces.back().runs.run_bytes, 232u);
  EXPECT_EQ(pieces.front().tensor_index, 7u);
  ExpectExactCover(runs, pieces, 256);
}

TEST(CutPieces, StridedSliceByWholeRuns) {
  std::vector<Piece> pieces;
  const StridedRuns runs{8, 30, 90, 20};  // 20 runs of 30 bytes: 8 runs per 256-byte piece
  CutPieces(0, "/m/f", "127.0.0.1:7070", "a", runs, &pieces, 256);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].runs.run_count, 8u);
  EXPECT_EQ(pieces[2].runs.run_count, 4u);
  EXPECT_EQ(pieces[0].server, "127.0.0.1:7070");
  ExpectExactCover(runs, pieces, 256);
}

TEST(CutPieces, RunsOfHalfAPieceOrMoreAreCutEachByBytes) {
  std::vector<Piece> pieces;
  const StridedRuns runs{0, 300, 1000, 3};
  CutPieces(0, "/m/f", "", "", runs, &pieces, 256);
  ASSERT_EQ(pieces.size(), 6u);  // each run: 256 + 44
  for (const Piece& p : pieces) EXPECT_EQ(p.runs.run_count, 1u);
  ExpectExactCover(runs, pieces, 256);
}

TEST(CutPieces, NothingForNoBytes) {
  std::vector<Piece> pieces;
  CutPieces(0, "/m/f", "", "", StridedRuns{0, 0, 0, 0}, &pieces, 256);
  EXPECT_TRUE(pieces.empty());
}

}  // namespace
}  // namespace metaload
