#include "planner/plan/quant_boxes.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

namespace metaload {
namespace {

using ::testing::HasSubstr;

TensorLayout Stored(std::string name, DType dtype, std::vector<int64_t> shape) {
  TensorLayout t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

QuantizedValue Fp8Block(std::vector<int64_t> shape) {
  Quantization q;
  q.method = "fp8";
  q.scheme = QuantScheme::kFp8Block;
  q.block = {128, 128};
  std::vector<int64_t> scales = {(shape[0] + 127) / 128, (shape[1] + 127) / 128};
  QuantizedSet set =
      FindQuantized(q, {Stored("w", DType::kF8E4M3, shape), Stored("w_scale_inv", DType::kF32, scales)});
  return set.values.at("w");
}

TensorBox Box(std::vector<int64_t> start, std::vector<int64_t> length) { return TensorBox{start, length}; }

// The transformers case of the issue: [160, 256] split over two ranks by rows (80 each) cuts
// through the first row block; both read it, only the holder of row 0 proves it.
TEST(QuantBoxes, RowSplitThroughABlockIsReadByBothProvenByOne) {
  const QuantizedValue v = Fp8Block({160, 256});
  const SourceBoxes first = ScaleBoxes(v, Box({0, 0}, {80, 256}));
  const SourceBoxes second = ScaleBoxes(v, Box({80, 0}, {80, 256}));
  EXPECT_EQ(first.read->start, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(first.read->length, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(first.proven->length, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(second.read->start, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(second.read->length, (std::vector<int64_t>{2, 2}));  // rows 80-127 and 128-159
  EXPECT_EQ(second.proven->start, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(second.proven->length, (std::vector<int64_t>{1, 2}));
  const SourceBoxes codes = CodeBoxes(v, Box({80, 0}, {80, 256}));
  EXPECT_EQ(codes.read->start, (std::vector<int64_t>{80, 0}));
  EXPECT_EQ(codes.read->length, (std::vector<int64_t>{80, 256}));
}

// Any split into boxes proves every scale block exactly once: checked over uneven splits of
// both dimensions against a count of the blocks each box proves.
TEST(QuantBoxes, EverySplitProvesEachBlockOnce) {
  const QuantizedValue v = Fp8Block({300, 260});
  for (int64_t rows : {1, 2, 3, 5, 7}) {
    for (int64_t cols : {1, 2, 3, 4}) {
      std::map<std::pair<int64_t, int64_t>, int> proven;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t r0 = 300 * r / rows, r1 = 300 * (r + 1) / rows, c0 = 260 * c / cols,
                        c1 = 260 * (c + 1) / cols;
          const SourceBoxes s = ScaleBoxes(v, Box({r0, c0}, {r1 - r0, c1 - c0}));
          ASSERT_TRUE(s.read.has_value());
          if (!s.proven.has_value()) continue;
          for (int64_t i = 0; i < s.proven->length[0]; ++i) {
            for (int64_t j = 0; j < s.proven->length[1]; ++j) {
              // a proven block lies inside what was read
              EXPECT_GE(s.proven->start[0] + i, s.read->start[0]);
              EXPECT_LT(s.proven->start[0] + i, s.read->start[0] + s.read->length[0]);
              ++proven[{s.proven->start[0] + i, s.proven->start[1] + j}];
            }
          }
        }
      }
      EXPECT_EQ(proven.size(), 3u * 3u) << rows << "x" << cols;
      for (const auto& [block, times] : proven) EXPECT_EQ(times, 1) << rows << "x" << cols;
    }
  }
}

TEST(QuantBoxes, EmptyBoxReadsNothing) {
  const QuantizedValue v = Fp8Block({300, 260});
  const SourceBoxes s = ScaleBoxes(v, Box({300, 0}, {0, 260}));
  EXPECT_FALSE(s.read.has_value());
  EXPECT_FALSE(s.proven.has_value());
}

TEST(QuantBoxes, PerTensorScaleIsProvenByTheHolderOfTheFirstElement) {
  Quantization q;
  q.method = "compressed-tensors";
  q.scheme = QuantScheme::kFp8Tensor;
  const QuantizedValue v =
      FindQuantized(q, {Stored("w", DType::kF8E4M3, {64, 32}), Stored("w_scale", DType::kF32, {})})
          .values.at("w");
  const SourceBoxes first = ScaleBoxes(v, Box({0, 0}, {32, 32}));
  const SourceBoxes second = ScaleBoxes(v, Box({32, 0}, {32, 32}));
  ASSERT_TRUE(first.proven.has_value());
  EXPECT_TRUE(first.proven->start.empty());
  ASSERT_TRUE(second.read.has_value());
  EXPECT_FALSE(second.proven.has_value());
}

TEST(QuantBoxes, Mxfp4ValueBoxMapsToGroupsOfTheSwappedGrid) {
  Quantization q;
  q.method = "mxfp4";
  q.scheme = QuantScheme::kMxfp4;
  const QuantizedValue v = FindQuantized(q, {Stored("e_blocks", DType::kU8, {4, 96, 3, 16}),
                                             Stored("e_scales", DType::kU8, {4, 96, 3})})
                               .values.at("e");
  // value [4, 96 (=3 groups x 32), 96 rows]; the box holds experts 1-2, value columns (grid
  // rows) 10-19 and value rows (grid columns) 40-69: groups 1 and 2.
  const TensorBox box = Box({1, 40, 10}, {2, 30, 10});
  const SourceBoxes codes = CodeBoxes(v, box);
  EXPECT_EQ(codes.read->start, (std::vector<int64_t>{1, 10, 1, 0}));
  EXPECT_EQ(codes.read->length, (std::vector<int64_t>{2, 10, 2, 16}));
  EXPECT_EQ(codes.proven->start, (std::vector<int64_t>{1, 10, 2, 0}));  // group 2 starts at 64, inside
  EXPECT_EQ(codes.proven->length, (std::vector<int64_t>{2, 10, 1, 16}));
  const SourceBoxes scales = ScaleBoxes(v, box);
  EXPECT_EQ(scales.read->length, (std::vector<int64_t>{2, 10, 2}));
}

TEST(KeptSplitProblem, BlockAlignedSplitsKeepTheirScales) {
  const QuantizedValue v = Fp8Block({384, 256});
  EXPECT_EQ(KeptSplitProblem(v, Box({128, 0}, {256, 256}), Box({1, 0}, {2, 2})), "");
  EXPECT_THAT(KeptSplitProblem(v, Box({96, 0}, {96, 256}), Box({1, 0}, {1, 2})),
              HasSubstr("cuts through its 128-element scale blocks"));
  EXPECT_THAT(KeptSplitProblem(v, Box({128, 0}, {128, 256}), Box({0, 0}, {1, 2})),
              HasSubstr("need those starting at [1, 0]"));
}

}  // namespace
}  // namespace metaload
