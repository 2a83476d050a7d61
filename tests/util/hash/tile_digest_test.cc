// Tile digests (util/hash/tile_digest.h): the sum of what ranks holding any split of a tensor
// prove is the whole tensor's digest (times its copies), a tile split across pieces is hashed
// once it is whole, a tile a rank holds in part is counted cut, and one changed byte changes it.
#include "util/hash/tile_digest.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace metaload {
namespace {

std::vector<uint8_t> Pattern(size_t n, uint32_t seed = 1) {
  std::vector<uint8_t> out(n);
  std::mt19937 gen(seed);
  for (uint8_t& b : out) b = static_cast<uint8_t>(gen());
  return out;
}

// The stored-byte runs of rows [r0, r1) x columns [c0, c1) of a [rows, cols] tensor.
StridedRuns Box2d(uint64_t cols, uint64_t element_bytes, uint64_t r0, uint64_t r1, uint64_t c0, uint64_t c1) {
  const uint64_t row = cols * element_bytes;
  if (c0 == 0 && c1 == cols) return {r0 * row, (r1 - r0) * row, (r1 - r0) * row, 1};
  return {r0 * row + c0 * element_bytes, (c1 - c0) * element_bytes, row, r1 - r0};
}

// What one rank holding `runs` of `bytes` proves, its pieces delivered in a shuffled order and
// cut at odd places (a tile may arrive in parts).
TensorProofSum Prove(DigestKind kind, const TileGrid& grid, const std::vector<uint8_t>& bytes,
                     const std::vector<StridedRuns>& runs, uint32_t seed = 7) {
  TileProof proof(kind, grid, runs);
  struct Part {
    uint64_t offset;
    uint64_t length;
  };
  std::vector<Part> parts;
  std::mt19937 gen(seed);
  for (const StridedRuns& r : runs) {
    for (uint64_t i = 0; i < r.run_count; ++i) {
      const uint64_t from = r.first_offset + i * r.stride_bytes;
      for (uint64_t at = 0; at < r.run_bytes;) {
        const uint64_t n = std::min<uint64_t>(r.run_bytes - at, 1 + gen() % 700);
        parts.push_back({from + at, n});
        at += n;
      }
    }
  }
  std::shuffle(parts.begin(), parts.end(), gen);
  for (const Part& p : parts) proof.Add(p.offset, absl::MakeConstSpan(bytes).subspan(p.offset, p.length));
  return proof.Finish();
}

std::vector<uint16_t> Sum(const std::vector<TensorProofSum>& proofs, size_t lanes) {
  std::vector<uint16_t> out(lanes, 0);
  for (const TensorProofSum& p : proofs) {
    for (size_t l = 0; l < lanes; ++l) out[l] = static_cast<uint16_t>(out[l] + p.lanes[l]);
  }
  return out;
}

TEST(TileGrid, KeepsTilesInsideRowsAndWholeUnderSplitsOfTheLastDimension) {
  // bf16 [4096, 4096]: fast tiles of 64 columns (a 64-way split of the columns cuts none).
  EXPECT_EQ(TileGridFor(DigestKind::kFast, {4096, 4096}, 2).tile_bytes, 128u);
  EXPECT_EQ(TileGridFor(DigestKind::kFast, {4096, 4096}, 2).tile_count, 4096u * 64);
  // strong: 8-way column splits, tiles of 512 columns (1 KiB).
  EXPECT_EQ(TileGridFor(DigestKind::kStrong, {4096, 4096}, 2).tile_bytes, 1024u);
  // 14336 = 2^11 * 7 columns: the largest power of two dividing it that keeps 64 tiles a row.
  EXPECT_EQ(TileGridFor(DigestKind::kFast, {4096, 14336}, 2).tile_bytes, 256u);
  // An odd last dimension: one element a tile. A column and a scalar alike.
  EXPECT_EQ(TileGridFor(DigestKind::kFast, {10, 4095}, 4).tile_bytes, 4u);
  EXPECT_EQ(TileGridFor(DigestKind::kFast, {4096}, 2).tile_bytes, 2u);
  EXPECT_EQ(TileGridFor(DigestKind::kFast, {4096}, 2).tile_count, 4096u);
  EXPECT_EQ(TileGridFor(DigestKind::kStrong, {}, 4).tile_count, 1u);
  EXPECT_EQ(TileGridFor(DigestKind::kFast, {0, 8}, 4).tile_count, 0u);
  // [experts, rows, columns]: rows of the last dimension, whatever the dimensions before it.
  EXPECT_EQ(TileGridFor(DigestKind::kFast, {8, 64, 1024}, 2).tile_bytes, 32u);
}

class EverySplitSumsToTheDigest : public ::testing::TestWithParam<DigestKind> {};

TEST_P(EverySplitSumsToTheDigest, RowsColumnsBoxesStridedRowsAndReplicas) {
  const DigestKind kind = GetParam();
  const uint64_t rows = 37, cols = 512, eb = 2;  // 37 rows: no even split
  const TileGrid grid = TileGridFor(kind, {static_cast<int64_t>(rows), static_cast<int64_t>(cols)}, eb);
  const std::vector<uint8_t> bytes = Pattern(rows * cols * eb);
  const std::vector<uint16_t> digest = DigestOf(kind, grid, bytes);
  const size_t lanes = LaneCount(kind);
  ASSERT_EQ(digest.size(), lanes);

  // One rank holding all of it, in shuffled pieces.
  TensorProofSum whole = Prove(kind, grid, bytes, {Box2d(cols, eb, 0, rows, 0, cols)});
  EXPECT_EQ(whole.lanes, digest);
  EXPECT_EQ(whole.tiles_hashed, grid.tile_count);
  EXPECT_EQ(whole.tiles_cut, 0u);

  // FSDP rows, uneven (ceil(37/4) = 10): 10, 10, 10, 7.
  std::vector<TensorProofSum> fsdp;
  for (uint64_t r = 0; r < rows; r += 10)
    fsdp.push_back(Prove(kind, grid, bytes, {Box2d(cols, eb, r, std::min(rows, r + 10), 0, cols)}));
  EXPECT_EQ(Sum(fsdp, lanes), digest);

  // Columns split 8 ways (tensor parallel on the last dimension), then rows x columns.
  std::vector<TensorProofSum> tp, both;
  for (uint64_t c = 0; c < cols; c += cols / 8) {
    tp.push_back(Prove(kind, grid, bytes, {Box2d(cols, eb, 0, rows, c, c + cols / 8)}));
    for (uint64_t r = 0; r < rows; r += 19) {
      both.push_back(Prove(kind, grid, bytes, {Box2d(cols, eb, r, std::min(rows, r + 19), c, c + cols / 8)}));
    }
  }
  EXPECT_EQ(Sum(tp, lanes), digest);
  EXPECT_EQ(Sum(both, lanes), digest);
  for (const TensorProofSum& p : both) EXPECT_EQ(p.tiles_cut, 0u);

  // _StridedShard-like: rank k holds rows k, k + 3, k + 6, ... (one run a row).
  std::vector<TensorProofSum> strided;
  for (uint64_t k = 0; k < 3; ++k) {
    std::vector<StridedRuns> runs;
    for (uint64_t r = k; r < rows; r += 3) runs.push_back(Box2d(cols, eb, r, r + 1, 0, cols));
    strided.push_back(Prove(kind, grid, bytes, runs));
  }
  EXPECT_EQ(Sum(strided, lanes), digest);

  // Two replicas of the FSDP split: twice the digest.
  std::vector<TensorProofSum> replicas = fsdp;
  replicas.insert(replicas.end(), fsdp.begin(), fsdp.end());
  EXPECT_EQ(Sum(replicas, lanes), ScaleLanes(digest, 2));
}

INSTANTIATE_TEST_SUITE_P(Kinds, EverySplitSumsToTheDigest,
                         ::testing::Values(DigestKind::kFast, DigestKind::kStrong),
                         [](const auto& info) { return std::string(DigestKindName(info.param)); });

TEST(TileProof, ASplitThatCutsTilesCountsThemAndHashesOnlyWholeOnes) {
  const uint64_t rows = 4, cols = 4096, eb = 2;
  const TileGrid grid = TileGridFor(DigestKind::kFast, {4, 4096}, eb);  // 64 columns a tile
  const std::vector<uint8_t> bytes = Pattern(rows * cols * eb);
  // Columns [0, 683) of a 6-way split: 10 whole tiles and one cut in each of the 4 rows.
  TensorProofSum p = Prove(DigestKind::kFast, grid, bytes, {Box2d(cols, eb, 0, rows, 0, 683)});
  EXPECT_EQ(p.tiles_hashed, 4u * 10);
  EXPECT_EQ(p.tiles_cut, 4u);
}

TEST(TileProof, AWholeTileWhosePartsNeverAllArriveIsCut) {
  const TileGrid grid = TileGridFor(DigestKind::kFast, {2, 4096}, 2);
  const std::vector<uint8_t> bytes = Pattern(2 * 4096 * 2);
  TileProof proof(DigestKind::kFast, grid, {{0, bytes.size(), bytes.size(), 1}});
  proof.Add(0, absl::MakeConstSpan(bytes).subspan(0, 200));  // tile 0 whole, tile 1 in part
  TensorProofSum p = proof.Finish();
  EXPECT_EQ(p.tiles_hashed, 1u);
  EXPECT_EQ(p.tiles_cut, 1u);
}

TEST(TileDigest, OneChangedByteChangesTheSumOfEitherKind) {
  for (DigestKind kind : {DigestKind::kFast, DigestKind::kStrong}) {
    const TileGrid grid = TileGridFor(kind, {64, 1024}, 2);
    std::vector<uint8_t> bytes = Pattern(64 * 1024 * 2);
    const std::vector<uint16_t> before = DigestOf(kind, grid, bytes);
    bytes[77777] ^= 1;
    EXPECT_NE(DigestOf(kind, grid, bytes), before) << DigestKindName(kind);
    bytes[77777] ^= 1;
    EXPECT_EQ(DigestOf(kind, grid, bytes), before);
    // Two tiles swapped: the same bytes in other places are another tensor (a term knows its tile).
    std::swap_ranges(bytes.begin(), bytes.begin() + grid.tile_bytes, bytes.begin() + 5 * grid.tile_bytes);
    EXPECT_NE(DigestOf(kind, grid, bytes), before) << DigestKindName(kind);
  }
}

TEST(TileDigest, KnownValuesPinTheDefinition) {
  // Bytes 0, 1, 2, ... of a [4, 256] U8 tensor. The values were computed once here and checked
  // against an independent implementation (tests/integration/cli/tile_digest_reference.py).
  std::vector<uint8_t> bytes(4 * 256);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i);
  const TileGrid fast = TileGridFor(DigestKind::kFast, {4, 256}, 1);
  EXPECT_EQ(fast.tile_bytes, 4u);
  EXPECT_EQ(LanesForMessage(DigestKind::kFast, DigestOf(DigestKind::kFast, fast, bytes)),
            "0x89057d84210bbde8");
  const TileGrid strong = TileGridFor(DigestKind::kStrong, {4, 256}, 1);
  EXPECT_EQ(strong.tile_bytes, 32u);
  EXPECT_EQ(LanesForMessage(DigestKind::kStrong, DigestOf(DigestKind::kStrong, strong, bytes)),
            "sha256:557e6dcf12f5eae0");
}

TEST(TileDigest, KindsAndLanesRoundTrip) {
  EXPECT_EQ(*ParseDigestKind("fast"), DigestKind::kFast);
  EXPECT_EQ(*ParseDigestKind("strong"), DigestKind::kStrong);
  EXPECT_EQ(ParseDigestKind("xxh3").status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<uint16_t> lanes = {1, 0xffff, 0x1234, 7};
  EXPECT_EQ(LanesFromBytes(DigestKind::kFast, LanesToBytes(lanes)), lanes);
  EXPECT_TRUE(LanesFromBytes(DigestKind::kStrong, LanesToBytes(lanes)).empty()) << "wrong length";
  EXPECT_EQ(ScaleLanes(lanes, 3), (std::vector<uint16_t>{3, 0xfffd, 0x369c, 21}));
}

}  // namespace
}  // namespace metaload
