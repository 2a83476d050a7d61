// What a rank's fill proves of the bytes it read (client/read/fill.h FillResult::proof): the
// terms of the tiles it holds, from the bytes as stored, whatever its box (FSDP rows, tensor
// parallel columns), read in pieces by several threads and converted to another dtype after; and
// the proofs of ranks holding any split of a tensor sum to its registered digest.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "client/read/fill.h"
#include "planner/format/safetensors_writer.h"
#include "tests/test_support.h"
#include "util/hash/tile_digest.h"

namespace metaload {
namespace {

constexpr int64_t kRows = 300, kCols = 4096;  // BF16: 2.3 MiB, read in pieces of 1 MiB

class FillProofTest : public ::testing::TestWithParam<DigestKind> {
 protected:
  void SetUp() override {
    path_ = dir_.File("model.safetensors");
    ASSERT_TRUE(WriteSafetensors(path_, {TensorToWrite{"w",
                                                       DType::kBF16,
                                                       {kRows, kCols},
                                                       [](absl::Span<uint8_t> out) {
                                                         for (size_t i = 0; i < out.size(); ++i)
                                                           out[i] =
                                                               static_cast<uint8_t>(i * 2654435761u >> 9);
                                                       }}})
                    .ok());
    absl::StatusOr<Checkpoint> checkpoint = OpenCheckpoint(path_);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    stored_ = checkpoint->tensors.at(0);
    const std::string file = testing::ReadFileOrDie(path_);
    const auto* bytes = reinterpret_cast<const uint8_t*>(file.data()) + stored_.begin_offset;
    const TileGrid grid = TileGridFor(GetParam(), stored_.shape, 2);
    digest_ = DigestOf(GetParam(), grid, absl::MakeConstSpan(bytes, stored_.size_bytes()));
    stored_.digest = TensorDigest{GetParam(), grid.tile_bytes, LanesToBytes(digest_)};
    routes_["model.safetensors"] = FileRoute{"model.safetensors", path_, file.size(), {}, {}};
  }

  // One rank holding `box` of w, in `dtype` (converted from BF16 on load when another).
  TensorProofSum Prove(const TensorBox& box, torch::ScalarType dtype = torch::kBFloat16) {
    std::vector<FillTarget> targets(1);
    targets[0].name = "w";
    targets[0].stored = stored_;
    targets[0].box = box;
    targets[0].dest = torch::empty({box.length[0], box.length[1]}, torch::TensorOptions().dtype(dtype));
    FillSettings settings;
    settings.read.source = Source::kDirect;
    settings.read.read_threads = 3;
    absl::StatusOr<FillOutcome> outcome = FillTargets(targets, routes_, settings);
    EXPECT_TRUE(outcome.ok()) << outcome.status();
    if (!outcome.ok() || !outcome->results[0].filled || !outcome->results[0].proof.has_value()) return {};
    return outcome->results[0].proof->sum;
  }

  static std::vector<uint16_t> Sum(const std::vector<TensorProofSum>& proofs) {
    std::vector<uint16_t> out(LaneCount(GetParam()), 0);
    for (const TensorProofSum& p : proofs) {
      for (size_t l = 0; l < out.size() && l < p.lanes.size(); ++l)
        out[l] = static_cast<uint16_t>(out[l] + p.lanes[l]);
    }
    return out;
  }

  testing::TempDir dir_;
  std::string path_;
  TensorLayout stored_;
  std::vector<uint16_t> digest_;
  std::map<std::string, FileRoute> routes_;
};

TEST_P(FillProofTest, RowsOfAnUnevenFsdpSplitSumToTheDigest) {
  std::vector<TensorProofSum> ranks;
  for (int64_t r = 0; r < kRows; r += 77)
    ranks.push_back(Prove({{r, 0}, {std::min<int64_t>(77, kRows - r), kCols}}));
  EXPECT_EQ(Sum(ranks), digest_);
  for (const TensorProofSum& p : ranks) EXPECT_EQ(p.tiles_cut, 0u);
}

TEST_P(FillProofTest, ColumnsOfATensorParallelSplitSumToTheDigestEvenConvertedOnLoad) {
  std::vector<TensorProofSum> ranks;
  for (int64_t c = 0; c < kCols; c += kCols / 8)
    ranks.push_back(Prove({{0, c}, {kRows, kCols / 8}}, torch::kFloat32));
  EXPECT_EQ(Sum(ranks), digest_) << "the proof is of the bytes as stored, before the conversion";
}

TEST_P(FillProofTest, AWholeTensorReadInPiecesByThreeThreadsIsTheDigest) {
  const TensorProofSum whole = Prove({{0, 0}, {kRows, kCols}});
  EXPECT_EQ(whole.lanes, digest_);
  EXPECT_EQ(whole.tiles_hashed, TileGridFor(GetParam(), stored_.shape, 2).tile_count);
}

INSTANTIATE_TEST_SUITE_P(Kinds, FillProofTest, ::testing::Values(DigestKind::kFast, DigestKind::kStrong),
                         [](const auto& info) { return std::string(DigestKindName(info.param)); });

}  // namespace
}  // namespace metaload
