// A rank's check of the bytes it read against the digest recorded at `register --digest`
// (client/read/fill.h): which targets are checked, and the error that names both digests.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "client/read/fill.h"
#include "util/hash/xxh3.h"

namespace metaload {
namespace {

FillTarget Target(std::optional<uint64_t> xxh3) {
  FillTarget target;
  target.name = "layers.0.w";
  target.stored =
      TensorLayout{"layers.0.w", DType::kU8, {4, 8}, "model-00001-of-00002.safetensors", 100, 132, xxh3};
  target.dest = torch::zeros({4, 8}, torch::kUInt8);
  return target;
}

TEST(DigestCheck, OnlyWholeCpuTargetsWithARecordedDigestAreChecked) {
  EXPECT_EQ(PlannedDigestCheck(Target(std::nullopt)), DigestCheck::kNone);
  FillTarget whole = Target(1);
  EXPECT_EQ(PlannedDigestCheck(whole), DigestCheck::kMatched);
  whole.box = TensorBox{{0, 0}, {4, 8}};
  EXPECT_EQ(PlannedDigestCheck(whole), DigestCheck::kMatched)
      << "a box of the whole tensor is the whole tensor";
  FillTarget rows = Target(1);
  rows.box = TensorBox{{2, 0}, {2, 8}};
  EXPECT_EQ(PlannedDigestCheck(rows), DigestCheck::kSliced);
  FillTarget columns = Target(1);
  columns.box = TensorBox{{0, 0}, {4, 4}};
  EXPECT_EQ(PlannedDigestCheck(columns), DigestCheck::kSliced);
}

TEST(DigestCheck, BytesThatDifferFailWithDataLossNamingBothDigestsAndTheFile) {
  std::vector<uint8_t> bytes(32, 7);
  const uint64_t recorded = Xxh3(bytes);
  FillTarget target = Target(recorded);
  EXPECT_TRUE(CheckDigest(target, bytes.data(), bytes.size()).ok());
  bytes[31] ^= 0x10;
  absl::Status changed = CheckDigest(target, bytes.data(), bytes.size());
  EXPECT_EQ(changed.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(changed.message(), "bytes differ from the digest recorded at registration (xxh3 " +
                                   Xxh3Hex(recorded) + " recorded, " + Xxh3Hex(Xxh3(bytes)) +
                                   " read) in model-00001-of-00002.safetensors");
  EXPECT_TRUE(CheckDigest(Target(std::nullopt), bytes.data(), bytes.size()).ok())
      << "nothing recorded: unchecked";
}

}  // namespace
}  // namespace metaload
