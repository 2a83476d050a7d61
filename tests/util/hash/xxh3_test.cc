// XXH3-64 as recorded by `register --digest` and checked by ranks (util/hash/xxh3.h).
#include "util/hash/xxh3.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/test_support.h"

namespace metaload {
namespace {

using ::metaload::testing::Bytes;

TEST(Xxh3, EmptyInputHasTheReferenceValue) {
  EXPECT_EQ(Xxh3({}), 0x2D06800538D394C2ull);
  EXPECT_EQ(Xxh3Hex(Xxh3({})), "0x2d06800538d394c2");
}

TEST(Xxh3, AStreamInPiecesEqualsOneBuffer) {
  std::vector<uint8_t> data(1 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  const uint64_t whole = Xxh3(data);
  Xxh3Stream stream;
  for (size_t at = 0; at < data.size(); at += 77777) {
    stream.Update(absl::MakeConstSpan(data).subspan(at, 77777));
  }
  EXPECT_EQ(stream.Digest(), whole);
  stream.Reset();
  EXPECT_EQ(stream.Digest(), Xxh3({}));
}

TEST(Xxh3, OneFlippedByteChangesTheDigest) {
  std::string text(4096, 'a');
  const uint64_t before = Xxh3(Bytes(text));
  text[1234] ^= 1;
  EXPECT_NE(Xxh3(Bytes(text)), before);
}

}  // namespace
}  // namespace metaload
