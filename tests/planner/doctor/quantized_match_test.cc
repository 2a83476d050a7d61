// MatchQuantization and its words: codes read as values are refused without --dequantize, filled
// with it; a weight without its scale, a scale of the wrong shape and a method metaload does not
// read are refused naming the tensor or the method; an MXFP4 value of the swapped shape is found.
#include "planner/doctor/quantized_match.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/doctor/check_report.h"
#include "planner/doctor/match.h"
#include "tests/planner/model_builders.h"

namespace metaload {
namespace {

using ::metaload::testing::MakeTensor;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kWeight[] = "layer.proj.weight";
constexpr char kScale[] = "layer.proj.weight_scale_inv";

Quantization Fp8Blocks() {
  return *ParseQuantization(
              R"({"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}})",
              "config.json")
              .value();
}

Checkpoint Stored(
    const std::vector<std::pair<std::string, std::pair<std::vector<int64_t>, DType>>>& tensors) {
  Checkpoint ckpt;
  ckpt.dir = "/m";
  ckpt.files = {"model.safetensors"};
  uint64_t offset = 64;
  for (const auto& [name, layout] : tensors) {
    TensorLayout t;
    t.name = name;
    t.shape = layout.first;
    t.dtype = layout.second;
    t.file = "model.safetensors";
    t.begin_offset = offset;
    offset += static_cast<uint64_t>(NumElements(t.shape) * DTypeSizeBytes(t.dtype));
    t.end_offset = offset;
    ckpt.tensors.push_back(std::move(t));
  }
  ckpt.BuildIndex();
  return ckpt;
}

Skeleton OneWeight(std::vector<int64_t> shape, DType dtype = DType::kBF16,
                   const std::string& name = kWeight) {
  Skeleton s;
  s.model = "m";
  s.tensors = {MakeTensor(name, std::move(shape), dtype)};
  return s;
}

struct Judged {
  MatchReport report;
  std::string text;
  bool passes;
};

Judged Judge(const Skeleton& s, const Checkpoint& ckpt, const std::optional<Quantization>& q,
             bool dequantize) {
  Judged j{MatchSkeleton(s, ckpt), "", false};
  MatchQuantization(s, &ckpt.tensors, q, "/m/config.json", dequantize, &j.report);
  j.text = CheckReportToText(j.report, {"s", "/m", "m", true});
  j.passes = CheckPasses(j.report, /*strict=*/true);
  return j;
}

std::string LastLine(const std::string& text) {
  const std::string trimmed = text.substr(0, text.size() - 1);
  return trimmed.substr(trimmed.rfind('\n') + 1);
}

// A partial last block on both dimensions (300 = 2 x 128 + 44): 3 x 2 scales.
Checkpoint Fp8Checkpoint() {
  return Stored({{kWeight, {{300, 200}, DType::kF8E4M3}}, {kScale, {{3, 2}, DType::kF32}}});
}

TEST(QuantizedMatchTest, CodesIntoAFloatModuleAreRefusedWithoutDequantize) {
  const Judged j = Judge(OneWeight({300, 200}), Fp8Checkpoint(), Fp8Blocks(), false);
  EXPECT_FALSE(j.passes);
  EXPECT_THAT(j.text,
              HasSubstr("quantization (1):\n  the checkpoint is quantized: fp8: FP8 codes, one scale per "
                        "128x128 block (declared by /m/config.json); 1 value stored as codes and scales\n"));
  EXPECT_THAT(j.text,
              HasSubstr("layer.proj.weight is BF16 in the skeleton but stored quantized (fp8-block 128x128: "
                        "layer.proj.weight F8_E4M3 x layer.proj.weight_scale_inv F32)"));
  EXPECT_EQ(
      LastLine(j.text),
      "verdict: refused \xE2\x80\x94 1 tensor stored as fp8 codes would be read as values without "
      "dequantization: load with --dequantize (`metactl check --dequantize` judges that load), or build "
      "the module quantized");
}

TEST(QuantizedMatchTest, DequantizeFillsTheValueAndConsumesItsScale) {
  const Judged j = Judge(OneWeight({300, 200}), Fp8Checkpoint(), Fp8Blocks(), true);
  EXPECT_TRUE(j.passes) << j.text;
  ASSERT_EQ(j.report.quantization->dequantized.size(), 1u);
  EXPECT_EQ(j.report.quantization->dequantized[0].held, DType::kBF16);
  EXPECT_THAT(j.report.unexpected, IsEmpty());
  EXPECT_THAT(j.report.refused_conversions, IsEmpty());
  EXPECT_EQ(LastLine(j.text),
            "verdict: OK \xE2\x80\x94 nothing would stay on meta (1 tensor dequantized on load)");
}

TEST(QuantizedMatchTest, AWeightWithoutItsScaleIsAProblemUnderDequantize) {
  const Checkpoint ckpt = Stored({{kWeight, {{300, 200}, DType::kF8E4M3}}});
  const Judged j = Judge(OneWeight({300, 200}), ckpt, Fp8Blocks(), true);
  EXPECT_FALSE(j.passes);
  ASSERT_EQ(j.report.quantization->problems.size(), 1u);
  EXPECT_EQ(j.report.quantization->problems[0].first, kWeight);
  EXPECT_THAT(j.report.refused_conversions, IsEmpty());  // said once, as the problem
  EXPECT_THAT(j.text, HasSubstr("layer.proj.weight: stored as F8_E4M3 codes, but the checkpoint has no "
                                "layer.proj.weight_scale_inv to scale them"));
  EXPECT_EQ(LastLine(j.text),
            "verdict: refused \xE2\x80\x94 1 stored tensor of the quantization cannot be dequantized "
            "(quantization problems, above)");
}

TEST(QuantizedMatchTest, AScaleOfTheWrongShapeNamesBothTensors) {
  // One scale short on the partial last block: [2, 2] for a 300 x 200 weight.
  const Checkpoint ckpt = Stored({{kWeight, {{300, 200}, DType::kF8E4M3}}, {kScale, {{2, 2}, DType::kF32}}});
  const Judged j = Judge(OneWeight({300, 200}), ckpt, Fp8Blocks(), true);
  EXPECT_FALSE(j.passes);
  ASSERT_EQ(j.report.quantization->problems.size(), 2u);
  EXPECT_THAT(j.text,
              HasSubstr("has shape [2, 2], but a [300, 200] weight in fp8-block 128x128 has [3, 2] scales"));
  EXPECT_THAT(j.report.unexpected, IsEmpty());
}

TEST(QuantizedMatchTest, AnUnsupportedMethodIsRefusedByNameWhateverTheFlag) {
  const Quantization bnb =
      *ParseQuantization(R"({"quantization_config": {"quant_method": "bitsandbytes"}})", "c").value();
  const Checkpoint ckpt = Stored({{kWeight, {{300, 200}, DType::kBF16}}});
  for (bool dequantize : {false, true}) {
    const Judged j = Judge(OneWeight({300, 200}), ckpt, bnb, dequantize);
    EXPECT_FALSE(j.passes);
    EXPECT_EQ(
        LastLine(j.text),
        "verdict: refused \xE2\x80\x94 the checkpoint is quantized with bitsandbytes, which metaload does "
        "not read (quantization, above)");
  }
}

TEST(QuantizedMatchTest, Mxfp4ValueOfTheSwappedShapeIsDequantized) {
  const Quantization mx =
      *ParseQuantization(R"({"quantization_config": {"quant_method": "mxfp4"}})", "c").value();
  // 2 experts, 3 rows, 1 group of 32: the value is [2, 32, 3].
  const Checkpoint ckpt = Stored({{"e.gate_up_proj_blocks", {{2, 3, 1, 16}, DType::kU8}},
                                  {"e.gate_up_proj_scales", {{2, 3, 1}, DType::kU8}}});
  const Judged missing = Judge(OneWeight({2, 32, 3}, DType::kBF16, "e.gate_up_proj"), ckpt, mx, false);
  EXPECT_FALSE(missing.passes);
  EXPECT_THAT(missing.text,
              HasSubstr("e.gate_up_proj is in the skeleton but not in the checkpoint: it is stored "
                        "quantized (mxfp4: e.gate_up_proj_blocks U8 x e.gate_up_proj_scales U8)"));
  const Judged filled = Judge(OneWeight({2, 32, 3}, DType::kBF16, "e.gate_up_proj"), ckpt, mx, true);
  EXPECT_TRUE(filled.passes) << filled.text;
  EXPECT_THAT(filled.report.missing, IsEmpty());
  // The unswapped shape is the codes' grid, not the value a module holds.
  const Judged unswapped = Judge(OneWeight({2, 3, 32}, DType::kBF16, "e.gate_up_proj"), ckpt, mx, true);
  EXPECT_FALSE(unswapped.passes);
  ASSERT_EQ(unswapped.report.shape_mismatches.size(), 1u);
  EXPECT_EQ(unswapped.report.shape_mismatches[0].checkpoint_shape, (std::vector<int64_t>{2, 32, 3}));
}

TEST(QuantizedMatchTest, CodesWithScalesAndNoDeclarationAreNamedAndNeverOk) {
  const Judged j = Judge(OneWeight({300, 200}), Fp8Checkpoint(), std::nullopt, true);
  EXPECT_FALSE(j.passes);
  ASSERT_TRUE(j.report.quantization.has_value());
  EXPECT_THAT(j.text,
              HasSubstr("but /m/config.json declares no quantization_config: metaload cannot tell how to "
                        "dequantize them"));
}

TEST(QuantizedMatchTest, AnUnquantizedCheckpointIsLeftAsItWas) {
  const Checkpoint ckpt = Stored({{kWeight, {{300, 200}, DType::kBF16}}});
  const Judged j = Judge(OneWeight({300, 200}), ckpt, std::nullopt, true);
  EXPECT_FALSE(j.report.quantization.has_value());
  EXPECT_TRUE(j.passes);
  EXPECT_EQ(LastLine(j.text), "verdict: OK \xE2\x80\x94 nothing would stay on meta");
}

TEST(QuantizedMatchTest, AModuleBuiltQuantizedKeepsTheCodesAsStored) {
  Skeleton s = OneWeight({300, 200}, DType::kF8E4M3);
  s.tensors.push_back(MakeTensor(kScale, {3, 2}, DType::kF32));
  const Judged j = Judge(s, Fp8Checkpoint(), Fp8Blocks(), false);
  EXPECT_TRUE(j.passes) << j.text;
  EXPECT_EQ(j.report.quantization->kept_as_stored, 1u);
}

}  // namespace
}  // namespace metaload
