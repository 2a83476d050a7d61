#include "planner/format/quantization.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/planner/format/stored_layout.h"

namespace metaload {
namespace {

using ::testing::HasSubstr;

Quantization Parsed(const std::string& json) {
  absl::StatusOr<std::optional<Quantization>> q = ParseQuantization(json, "config.json");
  EXPECT_TRUE(q.ok()) << q.status();
  EXPECT_TRUE(q->has_value());
  return **q;
}

TEST(ParseQuantization, DeepSeekFp8Blocks) {
  const Quantization q = Parsed(R"({"model_type": "deepseek_v3", "quantization_config": {"activation_scheme":
      "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}})");
  EXPECT_EQ(q.method, "fp8");
  ASSERT_TRUE(q.scheme.has_value());
  EXPECT_EQ(*q.scheme, QuantScheme::kFp8Block);
  EXPECT_EQ(q.block, (std::vector<int64_t>{128, 128}));
  EXPECT_THAT(q.Description(), HasSubstr("one scale per 128x128 block"));
}

TEST(ParseQuantization, CompressedTensorsChannelAndTensor) {
  const std::string channel = R"({"quantization_config": {"quant_method": "compressed-tensors", "format":
      "float-quantized", "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8,
      "type": "float", "strategy": "channel", "symmetric": true, "dynamic": false}}}, "ignore": ["lm_head"]}})";
  EXPECT_EQ(*Parsed(channel).scheme, QuantScheme::kFp8Channel);
  std::string tensor = channel;
  tensor.replace(tensor.find("\"channel\""), 9, "\"tensor\"");
  EXPECT_EQ(*Parsed(tensor).scheme, QuantScheme::kFp8Tensor);
  std::string packed = channel;
  packed.replace(packed.find("float-quantized"), 15, "pack-quantized");
  const Quantization p = Parsed(packed);
  EXPECT_FALSE(p.scheme.has_value());
  EXPECT_THAT(p.unsupported, HasSubstr("reads float-quantized (FP8) only"));
}

TEST(ParseQuantization, UnsupportedMethodsAreNamedNotErrors) {
  const Quantization q =
      Parsed(R"({"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": true}})");
  EXPECT_FALSE(q.scheme.has_value());
  EXPECT_THAT(q.Capability(), HasSubstr("refused: bitsandbytes"));
  const Quantization odd = Parsed(R"({"quantization_config": {"quant_method": "mystery"}})");
  EXPECT_THAT(odd.unsupported, HasSubstr("\"mystery\" is not one metaload reads"));
}

TEST(ParseQuantization, NoneAndHostileValues) {
  absl::StatusOr<std::optional<Quantization>> none = ParseQuantization(R"({"model_type": "llama"})", "c");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  for (const char* bad :
       {R"({"quantization_config": 7})", R"({"quantization_config": {}})",
        R"({"quantization_config": {"quant_method": "fp8", "weight_block_size": [0, 128]}})",
        R"({"quantization_config": {"quant_method": "fp8", "weight_block_size": [9223372036854775807, 1]}})",
        R"({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}})",
        R"({"quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized"}})"}) {
    absl::StatusOr<std::optional<Quantization>> q = ParseQuantization(bad, "config.json");
    EXPECT_FALSE(q.ok()) << bad;
    EXPECT_THAT(q.status().message(), HasSubstr("config.json")) << bad;
  }
}

TEST(FindQuantized, PairsFp8WeightsWithTheirBlockScales) {
  Quantization q;
  q.method = "fp8";
  q.scheme = QuantScheme::kFp8Block;
  q.block = {128, 128};
  const std::vector<TensorLayout> stored = {
      Stored("a.weight", DType::kF8E4M3, {160, 256}), Stored("a.weight_scale_inv", DType::kF32, {2, 2}),
      Stored("b.weight", DType::kF8E4M3, {300, 100}), Stored("b.weight_scale_inv", DType::kF32, {2, 1}),
      Stored("c.weight", DType::kF8E4M3, {64, 64}),   Stored("lm_head.weight", DType::kBF16, {10, 64}),
  };
  const QuantizedSet set = FindQuantized(q, stored);
  ASSERT_EQ(set.values.count("a.weight"), 1u);
  const QuantizedValue& a = set.values.at("a.weight");
  EXPECT_EQ(a.scales.name, "a.weight_scale_inv");
  EXPECT_EQ(a.scale_block, (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(a.Rule(), "fp8-block 128x128: a.weight F8_E4M3 x a.weight_scale_inv F32");
  EXPECT_EQ(set.source_of.at("a.weight_scale_inv"), "a.weight");
  // [300, 100] in 128x128 blocks has [3, 1] scales, not [2, 1].
  EXPECT_THAT(set.problems.at("b.weight"), HasSubstr("has [3, 1] scales"));
  EXPECT_THAT(set.problems.at("b.weight_scale_inv"), HasSubstr("the scale of b.weight"));
  EXPECT_THAT(set.problems.at("c.weight"), HasSubstr("no c.weight_scale_inv"));
  EXPECT_EQ(set.values.count("lm_head.weight"), 0u);
  EXPECT_EQ(set.problems.count("lm_head.weight"), 0u);
}

TEST(FindQuantized, Mxfp4ValuesAreTheSwappedUnpackedGrid) {
  Quantization q;
  q.method = "mxfp4";
  q.scheme = QuantScheme::kMxfp4;
  const QuantizedSet set = FindQuantized(q, {Stored("e.gate_up_proj_blocks", DType::kU8, {4, 96, 2, 16}),
                                             Stored("e.gate_up_proj_scales", DType::kU8, {4, 96, 2}),
                                             Stored("e.down_proj_blocks", DType::kU8, {4, 64, 3, 16}),
                                             Stored("e.down_proj_scales", DType::kU8, {4, 64, 2})});
  const QuantizedValue& v = set.values.at("e.gate_up_proj");
  EXPECT_EQ(v.grid_shape, (std::vector<int64_t>{4, 96, 64}));
  EXPECT_EQ(v.shape, (std::vector<int64_t>{4, 64, 96}));
  EXPECT_THAT(set.problems.at("e.down_proj_blocks"), HasSubstr("not [4, 64, 3]"));
}

}  // namespace
}  // namespace metaload
