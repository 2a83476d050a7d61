// A dequantizing plan's items from the wire (proto/convert.h PlanFromProto): each codes and scales
// tensor is hostile input the rank allocates and reads from, so every field is refused at the edge
// with its own error before any plan reaches the rank: a shape that overflows or is negative,
// offsets that do not hold exactly the shape's bytes (or wrap), an unknown dtype, no name or file,
// a negative index, no rule, a digest that does not fit the tensor.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "proto/convert.h"
#include "util/hash/tile_digest.h"

namespace metaload {
namespace {

// A BF16 [192, 192] value computed from F8_E4M3 codes and an F32 [2, 2] scale grid.
ReadItem DequantizedItem() {
  ReadItem item;
  item.tensor = "q.weight";
  item.dtype = DType::kBF16;
  item.shape = {192, 192};
  item.size_bytes = 192 * 192 * 2;
  DequantizedFrom from;
  from.rule = "fp8-block 128x128: q.weight F8_E4M3 x q.weight_scale_inv F32";
  from.codes =
      TensorLayout{"q.weight", DType::kF8E4M3, {192, 192}, "model.safetensors", 1000, 1000 + 192 * 192};
  from.codes.index = 3;
  from.scales = TensorLayout{"q.weight_scale_inv", DType::kF32, {2, 2}, "model.safetensors", 100, 116};
  from.scales.index = 4;
  item.dequantize = from;
  return item;
}

v1::Plan WirePlan(const std::function<void(v1::DequantizeSource&)>& forge) {
  Plan plan;
  plan.model = "m";
  plan.strategy = "layers";
  plan.world_size = 1;
  plan.ranks.push_back(RankPlan{0, "a", 0, 192 * 192 * 2, 0, {}, {DequantizedItem()}});
  v1::Plan proto;
  PlanToProto(plan, &proto);
  forge(*proto.mutable_ranks(0)->mutable_items(0)->mutable_dequantize());
  return proto;
}

std::string Refusal(const std::function<void(v1::DequantizeSource&)>& forge) {
  absl::StatusOr<Plan> parsed = PlanFromProto(WirePlan(forge));
  EXPECT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << parsed.status();
  return std::string(parsed.status().message());
}

TEST(DequantizeItemFromWire, RoundTripsEveryStoredField) {
  absl::StatusOr<Plan> parsed = PlanFromProto(WirePlan([](v1::DequantizeSource&) {}));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const ReadItem& item = parsed->ranks.front().items.front();
  ASSERT_TRUE(item.dequantize.has_value());
  const DequantizedFrom& from = *item.dequantize;
  EXPECT_EQ(from.rule, DequantizedItem().dequantize->rule);
  EXPECT_EQ(from.codes.name, "q.weight");
  EXPECT_EQ(from.codes.dtype, DType::kF8E4M3);
  EXPECT_EQ(from.codes.shape, (std::vector<int64_t>{192, 192}));
  EXPECT_EQ(from.codes.begin_offset, 1000u);
  EXPECT_EQ(from.codes.index, 3);
  EXPECT_EQ(from.scales.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(from.scales.end_offset, 116u);
  EXPECT_EQ(from.scales.index, 4);
}

TEST(DequantizeItemFromWire, WithoutAnIndexTheSlotIsUnknown) {
  absl::StatusOr<Plan> parsed =
      PlanFromProto(WirePlan([](v1::DequantizeSource& d) { d.clear_scales_index(); }));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->ranks.front().items.front().dequantize->scales.index, -1);
}

TEST(DequantizeItemFromWire, AShapeThatOverflowsOrIsNegativeIsRefused) {
  EXPECT_NE(Refusal([](v1::DequantizeSource& d) {
              d.mutable_codes()->set_shape(0, int64_t{1} << 62);
              d.mutable_codes()->set_shape(1, int64_t{1} << 62);
            }).find("dequantize codes q.weight: bad shape"),
            std::string::npos);
  EXPECT_NE(Refusal([](v1::DequantizeSource& d) {
              d.mutable_scales()->set_shape(0, -2);
            }).find("dequantize scales q.weight_scale_inv: bad shape [-2, 2]"),
            std::string::npos);
  EXPECT_NE(
      Refusal([](v1::DequantizeSource& d) { d.mutable_codes()->set_shape(0, INT64_MIN); }).find("bad shape"),
      std::string::npos);
}

TEST(DequantizeItemFromWire, OffsetsThatDoNotHoldTheShapesBytesAreRefused) {
  // One byte short: a read would leave the buffer's last element unwritten.
  EXPECT_NE(Refusal([](v1::DequantizeSource& d) {
              d.mutable_codes()->set_end_offset(1000 + 192 * 192 - 1);
            }).find("offsets [1000, 37863) do not hold its 36864 bytes of F8_E4M3 [192, 192]"),
            std::string::npos);
  // A scale grid claiming a terabyte of the file: a rank would allocate what the shape says, never more.
  EXPECT_NE(Refusal([](v1::DequantizeSource& d) {
              d.mutable_scales()->set_end_offset(UINT64_MAX);
            }).find("do not hold its 16 bytes"),
            std::string::npos);
  EXPECT_NE(Refusal([](v1::DequantizeSource& d) {
              d.mutable_codes()->set_begin_offset(UINT64_MAX);
            }).find("end offset before begin"),
            std::string::npos);
}

TEST(DequantizeItemFromWire, UnknownDtypeNoNameNoFileNegativeIndexOrNoRuleAreRefused) {
  EXPECT_NE(Refusal([](v1::DequantizeSource& d) { d.mutable_codes()->set_dtype("F4"); }).find("F4"),
            std::string::npos);
  EXPECT_NE(Refusal([](v1::DequantizeSource& d) {
              d.mutable_scales()->clear_name();
            }).find("dequantize scales: no tensor name or file"),
            std::string::npos);
  EXPECT_NE(Refusal([](v1::DequantizeSource& d) {
              d.mutable_codes()->clear_file();
            }).find("dequantize codes: no tensor name or file"),
            std::string::npos);
  EXPECT_NE(Refusal([](v1::DequantizeSource& d) { d.set_codes_index(INT64_MIN); }).find("negative index"),
            std::string::npos);
  EXPECT_NE(Refusal([](v1::DequantizeSource& d) { d.clear_rule(); }).find("dequantize: no rule"),
            std::string::npos);
}

TEST(DequantizeItemFromWire, ADigestThatDoesNotFitTheTensorIsRefused) {
  EXPECT_NE(Refusal([](v1::DequantizeSource& d) {
              v1::TensorDigest* digest = d.mutable_codes()->mutable_digest();
              digest->set_kind("fast");
              digest->set_tile_bytes(1);
              digest->set_lanes("xx");
            }).find("q.weight"),
            std::string::npos);
}

TEST(DequantizeItemFromWire, ADequantizedItemWithAFileOfItsOwnIsRefused) {
  v1::Plan proto = WirePlan([](v1::DequantizeSource&) {});
  v1::ReadItem* item = proto.mutable_ranks(0)->mutable_items(0);
  item->set_file("model.safetensors");
  item->set_begin_offset(0);
  item->set_end_offset(192 * 192 * 2);
  absl::StatusOr<Plan> parsed = PlanFromProto(proto);
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("no file or to_dtype of its own"), std::string::npos)
      << parsed.status();
}

}  // namespace
}  // namespace metaload
