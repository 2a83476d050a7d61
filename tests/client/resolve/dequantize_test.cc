// The dequantization rule against the formats' own definitions, computed here element by element
// (DeepSeek's weight_dequant; compressed-tensors' per-channel and per-tensor scales; OCP MX for
// MXFP4), on boxes that cut through blocks, through both the fused CPU kernel and the general path.
#include "client/resolve/dequantize.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>

#include "planner/plan/quant_boxes.h"
#include "tests/planner/format/stored_layout.h"

namespace metaload {
namespace {

QuantizedValue Fp8(QuantScheme scheme, std::vector<int64_t> shape, std::vector<int64_t> scale_shape) {
  Quantization q;
  q.method = scheme == QuantScheme::kFp8Block ? "fp8" : "compressed-tensors";
  q.scheme = scheme;
  if (scheme == QuantScheme::kFp8Block) q.block = {128, 128};
  const std::string scale = scheme == QuantScheme::kFp8Block ? "w_scale_inv" : "w_scale";
  QuantizedSet set =
      FindQuantized(q, {Stored("w", DType::kF8E4M3, shape), Stored(scale, DType::kF32, scale_shape)});
  EXPECT_EQ(set.problems.size(), 0u);
  return set.values.at("w");
}

// Same bits (NaN payloads included).
bool SameBits(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

at::Tensor BoxOf(const at::Tensor& whole, const TensorBox& box) {
  at::Tensor t = whole;
  for (size_t d = 0; d < box.start.size(); ++d) t = t.narrow(d, box.start[d], box.length[d]);
  return t.contiguous();
}

// The value of every element by the definition: f32(code) * f32(scale of its block), rounded once.
at::Tensor Fp8Reference(const QuantizedValue& v, const at::Tensor& codes, const at::Tensor& scales,
                        torch::ScalarType dtype) {
  at::Tensor out = torch::empty(codes.sizes(), torch::kFloat32);
  const at::Tensor c = codes.to(torch::kFloat32);
  auto cv = c.accessor<float, 2>();
  auto ov = out.accessor<float, 2>();
  const at::Tensor s = scales.to(torch::kFloat32).reshape({scales.numel() == 1 ? 1 : scales.size(0), -1});
  auto sv = s.accessor<float, 2>();
  for (int64_t i = 0; i < c.size(0); ++i) {
    for (int64_t j = 0; j < c.size(1); ++j) {
      const int64_t si = v.scheme == QuantScheme::kFp8Tensor ? 0 : i / v.scale_block[0];
      const int64_t sj = v.scheme == QuantScheme::kFp8Block ? j / v.scale_block[1] : 0;
      ov[i][j] = cv[i][j] * sv[si][sj];
    }
  }
  return out.to(dtype);
}

at::Tensor RandomCodes(std::vector<int64_t> shape) {
  // Every byte but the two NaNs of E4M3FN (0x7f, 0xff), so the comparison covers subnormals and -0.
  at::Tensor bytes = torch::randint(0, 254, shape, torch::kUInt8);
  bytes = torch::where(bytes >= 127, bytes + 1, bytes);
  return bytes.view(torch::kFloat8_e4m3fn);
}

struct Fp8Case {
  QuantScheme scheme;
  std::vector<int64_t> shape, scale_shape;
};

TEST(Dequantize, Fp8EveryBoxAndDtypeIsTheDefinitionBitForBit) {
  torch::manual_seed(7);
  const std::vector<Fp8Case> cases = {{QuantScheme::kFp8Block, {300, 260}, {3, 3}},
                                      {QuantScheme::kFp8Channel, {300, 260}, {300, 1}},
                                      {QuantScheme::kFp8Tensor, {300, 260}, {1}}};
  const std::vector<TensorBox> boxes = {{{0, 0}, {300, 260}},
                                        {{80, 0}, {80, 260}},
                                        {{0, 100}, {300, 60}},
                                        {{127, 129}, {2, 131}},
                                        {{299, 259}, {1, 1}}};
  for (const Fp8Case& c : cases) {
    const QuantizedValue v = Fp8(c.scheme, c.shape, c.scale_shape);
    const at::Tensor codes = RandomCodes(c.shape);
    const at::Tensor scales = torch::rand(c.scale_shape) * 4 - 2;
    for (torch::ScalarType dtype : {torch::kBFloat16, torch::kFloat16, torch::kFloat32}) {
      const at::Tensor want = Fp8Reference(v, codes, scales, dtype);
      for (const TensorBox& box : boxes) {
        const TensorBox scale_box = *ScaleBox(v, box);
        const at::Tensor box_codes = BoxOf(codes, *CodeBox(v, box)), box_scales = BoxOf(scales, scale_box);
        // The fused CPU kernel (a contiguous destination) and the general path (a transposed one).
        at::Tensor fused = torch::empty(box.length, dtype);
        at::Tensor general = torch::empty({box.length[1], box.length[0]}, dtype).t();
        ASSERT_TRUE(DequantizeInto(v, box, box_codes, box_scales, fused).ok());
        ASSERT_TRUE(DequantizeInto(v, box, box_codes, box_scales, general).ok());
        EXPECT_TRUE(SameBits(fused, BoxOf(want, box)))
            << QuantSchemeName(c.scheme) << " " << dtype << " " << box.start[0] << "," << box.start[1];
        EXPECT_TRUE(SameBits(general, BoxOf(want, box))) << QuantSchemeName(c.scheme) << " " << dtype;
      }
    }
  }
}

TEST(Dequantize, Mxfp4IsOcpMxWithTheLastTwoDimensionsSwapped) {
  torch::manual_seed(8);
  const QuantizedValue v = Mxfp4Experts({2, 5, 3, 16});
  const at::Tensor blocks = torch::randint(0, 256, {2, 5, 3, 16}, torch::kUInt8);
  at::Tensor scales = torch::randint(100, 150, {2, 5, 3}, torch::kUInt8);
  scales[0][0][0] = 0;    // 2^-127, a float32 subnormal
  scales[1][4][2] = 255;  // NaN
  const float fp4[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0f, -0.5, -1, -1.5, -2, -3, -4, -6};
  at::Tensor want = torch::empty({2, 96, 5}, torch::kFloat32);  // [E, 32 G, R]
  auto b = blocks.accessor<uint8_t, 4>();
  auto s = scales.accessor<uint8_t, 3>();
  auto w = want.accessor<float, 3>();
  for (int e = 0; e < 2; ++e) {
    for (int r = 0; r < 5; ++r) {
      for (int k = 0; k < 96; ++k) {
        const uint8_t byte = b[e][r][k / 32][(k % 32) / 2];
        const float code = fp4[k % 2 == 0 ? byte & 15 : byte >> 4];
        const uint8_t exponent = s[e][r][k / 32];
        w[e][k][r] = exponent == 255 ? NAN : std::ldexp(code, exponent - 127);
      }
    }
  }
  const at::Tensor want_bf16 = want.to(torch::kBFloat16);
  for (const TensorBox& box : {TensorBox{{0, 0, 0}, {2, 96, 5}}, TensorBox{{1, 32, 1}, {1, 64, 3}}}) {
    at::Tensor dest = torch::empty(box.length, torch::kBFloat16);
    ASSERT_TRUE(
        DequantizeInto(v, box, BoxOf(blocks, *CodeBox(v, box)), BoxOf(scales, *ScaleBox(v, box)), dest).ok());
    // NaN compares by its bits: torch's NaN rounding keeps the quiet NaN both ways.
    // NaN where the scale is 255 (OCP leaves its sign open), every other element bit for bit.
    const at::Tensor expected = BoxOf(want_bf16, box);
    const at::Tensor nan = torch::isnan(expected);
    EXPECT_TRUE(torch::equal(torch::isnan(dest), nan)) << box.start[1];
    EXPECT_TRUE(SameBits(torch::where(nan, torch::zeros_like(dest), dest),
                         torch::where(nan, torch::zeros_like(expected), expected)))
        << box.start[1];
    if (box.start[1] == 0) EXPECT_GT(nan.sum().item<int64_t>(), 0);
  }
}

TEST(Dequantize, ShapesNotTheBoxesAreRefused) {
  const QuantizedValue v = Fp8(QuantScheme::kFp8Block, {300, 260}, {3, 3});
  at::Tensor dest = torch::empty({10, 10}, torch::kBFloat16);
  const absl::Status s =
      DequantizeInto(v, TensorBox{{0, 0}, {10, 10}}, RandomCodes({10, 11}), torch::ones({3, 3}), dest);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("its codes hold [10, 11], the box needs [10, 10]"));
}

}  // namespace
}  // namespace metaload
