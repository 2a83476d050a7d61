// Planning a quantized checkpoint: without dequantization its codes are planned as stored (never
// claimed converted); with it, each value is counted in the target dtype and its item names the
// codes and scales read, through the JSON form; a skeleton derived from the headers becomes the
// module of the values.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/cluster.h"
#include "planner/plan/plan.h"
#include "planner/skeleton/dequantized_skeleton.h"
#include "planner/strategy/strategy.h"
#include "tests/planner/model_builders.h"

namespace metaload {
namespace {

using ::metaload::testing::MakeTensor;
using ::testing::HasSubstr;

constexpr char kWeight[] = "proj.weight";
constexpr char kScale[] = "proj.weight_scale_inv";

Checkpoint Fp8Checkpoint(std::vector<int64_t> scale_shape = {3, 2}) {
  Checkpoint ckpt;
  ckpt.dir = "/m";
  ckpt.files = {"model.safetensors"};
  TensorLayout codes{};
  codes.name = kWeight;
  codes.shape = {300, 200};
  codes.dtype = DType::kF8E4M3;
  codes.file = "model.safetensors";
  codes.begin_offset = 64;
  codes.end_offset = 64 + 300 * 200;
  TensorLayout scales = codes;
  scales.name = kScale;
  scales.shape = std::move(scale_shape);
  scales.dtype = DType::kF32;
  scales.begin_offset = codes.end_offset;
  scales.end_offset = scales.begin_offset + static_cast<uint64_t>(NumElements(scales.shape)) * 4;
  ckpt.tensors = {codes, scales};
  ckpt.BuildIndex();
  return ckpt;
}

QuantizedSet Fp8Set(const Checkpoint& ckpt) {
  const Quantization q =
      *ParseQuantization(
           R"({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})", "c")
           .value();
  return FindQuantized(q, ckpt.tensors);
}

Skeleton BF16Module() {
  Skeleton s;
  s.model = "m";
  s.tensors = {MakeTensor(kWeight, {300, 200}, DType::kBF16)};
  return s;
}

TEST(DequantizePlanTest, ValuesAreCountedInTheTargetDtypeAndNameTheirCodesAndScales) {
  const Checkpoint ckpt = Fp8Checkpoint();
  const QuantizedSet set = Fp8Set(ckpt);
  for (auto [load_dtype, bytes] : {std::pair<std::optional<DType>, uint64_t>{std::nullopt, 300 * 200 * 2},
                                   {DType::kF32, 300 * 200 * 4}}) {
    absl::StatusOr<std::vector<ReadItem>> items =
        WholeTensorItems(BF16Module(), &ckpt, false, load_dtype, &set);
    ASSERT_TRUE(items.ok()) << items.status();
    const ReadItem& item = items->front();
    EXPECT_EQ(item.size_bytes, bytes);
    EXPECT_EQ(item.dtype, load_dtype.value_or(DType::kBF16));
    EXPECT_TRUE(item.file.empty());
    EXPECT_FALSE(item.to_dtype.has_value());
    ASSERT_TRUE(item.dequantize.has_value());
    EXPECT_EQ(item.dequantize->codes.size_bytes(), 300u * 200u);
    EXPECT_EQ(item.dequantize->scales.name, kScale);
    EXPECT_EQ(item.dequantize->scales.size_bytes(), 3u * 2u * 4u);
    EXPECT_TRUE(ValidateReadItem(item, "item").ok());
  }
}

TEST(DequantizePlanTest, WithoutDequantizeCodesArePlannedAsStoredAndNeverConverted) {
  const Checkpoint ckpt = Fp8Checkpoint();
  absl::StatusOr<std::vector<ReadItem>> items = WholeTensorItems(BF16Module(), &ckpt, false, DType::kBF16);
  ASSERT_TRUE(items.ok()) << items.status();
  EXPECT_EQ(items->front().dtype, DType::kF8E4M3);
  EXPECT_EQ(items->front().size_bytes, 300u * 200u);
  EXPECT_FALSE(items->front().to_dtype.has_value());
  EXPECT_FALSE(items->front().dequantize.has_value());
}

TEST(DequantizePlanTest, AValueOfAnotherShapeIsRefusedNamingIt) {
  const Checkpoint ckpt = Fp8Checkpoint();
  const QuantizedSet set = Fp8Set(ckpt);
  Skeleton s = BF16Module();
  s.tensors.front().shape = {200, 300};
  absl::StatusOr<std::vector<ReadItem>> items = WholeTensorItems(s, &ckpt, false, std::nullopt, &set);
  ASSERT_FALSE(items.ok());
  EXPECT_THAT(items.status().message(),
              HasSubstr("proj.weight has shape [200, 300] in the skeleton but [300, 200]"));
}

TEST(DequantizePlanTest, TheJsonFormCarriesTheSourcesAndRefusesAFileBesideThem) {
  const Checkpoint ckpt = Fp8Checkpoint();
  const QuantizedSet set = Fp8Set(ckpt);
  const Skeleton s = BF16Module();
  const Cluster cluster = MakeUniformCluster(2, 1, 80ull << 30).value();
  PlanRequest request;
  request.skeleton = &s;
  request.checkpoint = &ckpt;
  request.cluster = &cluster;
  request.options.strategy = "fsdp";
  request.dequantize = &set;
  absl::StatusOr<Plan> plan = MakePlan(request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->ranks[0].size_bytes + plan->ranks[1].size_bytes, 300u * 200u * 2u);
  const std::string json = PlanToJson(*plan);
  EXPECT_THAT(json,
              HasSubstr("\"dequantize\": {\"rule\": \"fp8-block 128x128: proj.weight F8_E4M3 x "
                        "proj.weight_scale_inv F32\", \"codes\": {\"tensor\": \"proj.weight\", \"file\": "
                        "\"model.safetensors\", \"offsets\": [64, 60064]}"));
  absl::StatusOr<Plan> back = PlanFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(PlanToJson(*back), json);

  ReadItem forged = plan->ranks[0].items.front();
  forged.file = "model.safetensors";
  EXPECT_THAT(ValidateReadItem(forged, "item").message(), HasSubstr("no file or to_dtype of its own"));
  forged = plan->ranks[0].items.front();
  forged.dequantize->scales.end_offset = forged.dequantize->scales.begin_offset - 1;
  EXPECT_FALSE(ValidateReadItem(forged, "item").ok());
}

TEST(DequantizePlanTest, ADerivedSkeletonBecomesTheModuleOfItsValues) {
  const Checkpoint ckpt = Fp8Checkpoint();
  Skeleton derived;
  derived.tensors = {MakeTensor(kWeight, {300, 200}, DType::kF8E4M3), MakeTensor(kScale, {3, 2}, DType::kF32),
                     MakeTensor("norm.weight", {200}, DType::kBF16)};
  const Skeleton module = DequantizedSkeleton(derived, Fp8Set(ckpt), DType::kBF16);
  ASSERT_EQ(module.tensors.size(), 2u);
  EXPECT_EQ(module.tensors[0].name, kWeight);
  EXPECT_EQ(module.tensors[0].dtype, DType::kBF16);
  EXPECT_EQ(module.tensors[1].name, "norm.weight");

  // MXFP4: the codes' name and grid become the value's, its last two dimensions swapped.
  Checkpoint mx = ckpt;
  mx.tensors[0].name = "e.down_proj_blocks";
  mx.tensors[0].shape = {2, 3, 1, 16};
  mx.tensors[0].dtype = DType::kU8;
  mx.tensors[1].name = "e.down_proj_scales";
  mx.tensors[1].shape = {2, 3, 1};
  mx.tensors[1].dtype = DType::kU8;
  const Quantization q =
      *ParseQuantization(R"({"quantization_config": {"quant_method": "mxfp4"}})", "c").value();
  Skeleton mx_derived;
  mx_derived.tensors = {MakeTensor("e.down_proj_blocks", {2, 3, 1, 16}, DType::kU8),
                        MakeTensor("e.down_proj_scales", {2, 3, 1}, DType::kU8)};
  const Skeleton mx_module = DequantizedSkeleton(mx_derived, FindQuantized(q, mx.tensors), DType::kBF16);
  ASSERT_EQ(mx_module.tensors.size(), 1u);
  EXPECT_EQ(mx_module.tensors[0].name, "e.down_proj");
  EXPECT_EQ(mx_module.tensors[0].shape, (std::vector<int64_t>{2, 32, 3}));
}

}  // namespace
}  // namespace metaload
