// SHA-256 against FIPS 180-4 test vectors, including block-boundary lengths.
#include "util/hash/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace metaload {
namespace {

std::string Hex(const std::string& s) {
  return Sha256Hex(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalEqualsOneShotAtEveryBlockBoundary) {
  std::string data(300, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  for (size_t split = 0; split <= data.size(); split += 13) {
    Sha256 sha;
    sha.Update(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(data.data()), split));
    sha.Update(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(data.data()) + split, data.size() - split));
    EXPECT_EQ(sha.HexDigest(), Hex(data)) << "split at " << split;
  }
}

}  // namespace
}  // namespace metaload
