#include "planner/plan/quant_boxes.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "tests/planner/format/stored_layout.h"

namespace metaload {
namespace {

using ::testing::HasSubstr;

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

// Every holder of an FP8 value reads its whole scale tensor: a [160, 256] split by rows (80 each)
// cuts through the first row block, and a scale row read by one rank and not by another would
// leave the sum over ranks unable to tell copies apart.
TEST(QuantBoxes, Fp8ScalesAreReadWholeByEveryHolder) {
  const QuantizedValue v = Fp8Block({160, 256});
  for (const TensorBox& box : {Box({0, 0}, {80, 256}), Box({80, 0}, {80, 256}), Box({0, 64}, {160, 64})}) {
    const std::optional<TensorBox> scales = ScaleBox(v, box);
    EXPECT_EQ(scales->start, (std::vector<int64_t>{0, 0}));
    EXPECT_EQ(scales->length, (std::vector<int64_t>{2, 2}));
  }
  const std::optional<TensorBox> codes = CodeBox(v, Box({80, 0}, {80, 256}));
  EXPECT_EQ(codes->start, (std::vector<int64_t>{80, 0}));
  EXPECT_EQ(codes->length, (std::vector<int64_t>{80, 256}));
}

TEST(QuantBoxes, EmptyBoxReadsNothing) {
  const QuantizedValue v = Fp8Block({300, 260});
  EXPECT_FALSE(ScaleBox(v, Box({300, 0}, {0, 260})).has_value());
  EXPECT_FALSE(CodeBox(v, Box({300, 0}, {0, 260})).has_value());
}

TEST(QuantBoxes, PerTensorScaleIsReadWhole) {
  Quantization q;
  q.method = "compressed-tensors";
  q.scheme = QuantScheme::kFp8Tensor;
  const QuantizedValue v =
      FindQuantized(q, {Stored("w", DType::kF8E4M3, {64, 32}), Stored("w_scale", DType::kF32, {})})
          .values.at("w");
  const std::optional<TensorBox> s = ScaleBox(v, Box({32, 0}, {32, 32}));
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(s->start.empty());
}

TEST(QuantBoxes, Mxfp4ValueBoxMapsToGroupsOfTheSwappedGrid) {
  const QuantizedValue v = Mxfp4Experts({4, 96, 3, 16});
  // value [4, 96 (=3 groups x 32), 96 rows]; the box holds experts 1-2, value columns (grid
  // rows) 10-19 and value rows (grid columns) 40-69: groups 1 and 2.
  const TensorBox box = Box({1, 40, 10}, {2, 30, 10});
  const std::optional<TensorBox> codes = CodeBox(v, box);
  EXPECT_EQ(codes->start, (std::vector<int64_t>{1, 10, 1, 0}));
  EXPECT_EQ(codes->length, (std::vector<int64_t>{2, 10, 2, 16}));
  const std::optional<TensorBox> scales = ScaleBox(v, box);
  EXPECT_EQ(scales->start, (std::vector<int64_t>{1, 10, 0}));
  EXPECT_EQ(scales->length, (std::vector<int64_t>{2, 10, 3}));  // whole rows of groups
  // value rows 40-69 cut groups 1 and 2; 32-64 do not.
  EXPECT_THAT(CutGroupProblem(v, box),
              HasSubstr("[40, 70) of dimension 1 cuts through MXFP4's 32-value groups"));
  EXPECT_EQ(CutGroupProblem(v, Box({1, 32, 10}, {2, 32, 10})), "");
  EXPECT_EQ(CutGroupProblem(v, Box({1, 64, 10}, {2, 32, 10})), "");  // to the end
}

TEST(KeptSplitProblem, BlockAlignedSplitsKeepTheirScales) {
  const QuantizedValue v = Fp8Block({384, 256});
  EXPECT_EQ(KeptSplitProblem(v, Box({128, 0}, {256, 256}), Box({1, 0}, {2, 2})), "");
  EXPECT_THAT(KeptSplitProblem(v, Box({96, 0}, {96, 256}), Box({1, 0}, {1, 2})),
              HasSubstr("cuts through its 128-element scale blocks"));
  EXPECT_THAT(KeptSplitProblem(v, Box({128, 0}, {128, 256}), Box({0, 0}, {1, 2})),
              HasSubstr("need those starting at [1, 0]"));
}

// torchao's Float8Tensor declares its granularity as block_size, grid elements per scale: it
// must be the checkpoint's, whose name both sides of a refusal say.
TEST(KeptGranularityProblem, OnlyTheCheckpointsGranularityKeepsItsScales) {
  const QuantizedValue v = Fp8Block({512, 256});
  EXPECT_EQ(KeptGranularityProblem(v, {128, 128}), "");
  EXPECT_EQ(
      KeptGranularityProblem(v, {1, 256}),
      "w: the module keeps these codes with one scale per row ([1, 256]), but the checkpoint stores one "
      "per 128x128 block (fp8-block 128x128: w F8_E4M3 x w_scale_inv F32): build the module with the "
      "checkpoint's granularity (one scale per 128x128 block) or dequantize on load (dequantize=True)");
  EXPECT_THAT(KeptGranularityProblem(v, {512, 256}), HasSubstr("one scale per tensor ([512, 256]), but"));
  EXPECT_THAT(KeptGranularityProblem(v, {128, 64}), HasSubstr("one scale per 128x64 block, but"));
  // [160, 256] in 128-row blocks: torchao would take 2 scale rows as blocks of 80 rows.
  EXPECT_EQ(
      KeptGranularityProblem(Fp8Block({160, 256}), {128, 128}),
      "w: its dimension 0 (160) ends in a partial 128-element scale block, which a module declaring its "
      "block size cannot hold (torchao's Float8Tensor takes a block as the dimension / its scale count: 80 "
      "here): dequantize on load (dequantize=True)");
  Quantization q;
  q.method = "compressed-tensors";
  q.scheme = QuantScheme::kFp8Channel;
  const QuantizedValue channel =
      FindQuantized(q, {Stored("w", DType::kF8E4M3, {64, 32}), Stored("w_scale", DType::kBF16, {64, 1})})
          .values.at("w");
  EXPECT_EQ(KeptGranularityProblem(channel, {1, 32}), "");
  EXPECT_THAT(KeptGranularityProblem(channel, {64, 32}),
              HasSubstr("one scale per tensor ([64, 32]), but the checkpoint stores one per row ([1, 32])"));
}

}  // namespace
}  // namespace metaload
