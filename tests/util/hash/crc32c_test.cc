#include "util/hash/crc32c.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/test_support.h"

namespace metaload {
namespace {

using ::metaload::testing::Bytes;

// The check value of the CRC-32C catalogue and the vectors of RFC 3720 (iSCSI), appendix B.4.
TEST(Crc32cTest, MatchesPublishedVectors) {
  EXPECT_EQ(Crc32c(Bytes("123456789")), 0xE3069283u);
  EXPECT_EQ(Crc32c(Bytes("")), 0u);
  EXPECT_EQ(Crc32c(Bytes(std::string(32, '\0'))), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(Bytes(std::string(32, '\xff'))), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(Crc32c(Bytes(ascending)), 0x46DD794Eu);
  EXPECT_EQ(Crc32cExtendPortable(0, Bytes("123456789")), 0xE3069283u);
}

// The interleaved streams are joined across every boundary a 1 MiB chunk and its tail meet.
TEST(Crc32cTest, InterleavedStreamsEqualTheBytewiseFallbackAtEveryBoundary) {
  std::vector<uint8_t> data((1 << 20) + 77);
  uint32_t x = 12345;
  for (uint8_t& b : data) b = static_cast<uint8_t>((x = x * 1103515245 + 12345) >> 16);
  for (size_t n : {size_t{0}, size_t{7}, size_t{8}, size_t{24575}, size_t{24576}, size_t{24577},
                   size_t{49152 + 9}, size_t{1} << 20, data.size()}) {
    auto span = absl::MakeConstSpan(data.data(), n);
    EXPECT_EQ(Crc32c(span), Crc32cExtendPortable(0, span)) << n << " bytes";
  }
}

TEST(Crc32cTest, ExtendEqualsOneCallOverTheConcatenation) {
  const std::string a(30000, 'a'), b = "then some more bytes";
  EXPECT_EQ(Crc32cExtend(Crc32c(Bytes(a)), Bytes(b)), Crc32c(Bytes(a + b)));
}

TEST(Crc32cTest, OneFlippedBitChangesTheValue) {
  std::string s(1 << 20, 'z');
  const uint32_t before = Crc32c(Bytes(s));
  s[s.size() / 2] ^= 1;
  EXPECT_NE(Crc32c(Bytes(s)), before);
}

}  // namespace
}  // namespace metaload
