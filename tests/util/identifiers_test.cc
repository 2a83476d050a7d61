// Names, addresses and paths from outside, and how untrusted text is echoed back.
#include "util/identifiers.h"

#include <gtest/gtest.h>

#include <string>

namespace metaload {
namespace {

TEST(QuoteForMessage, EscapesNewlinesAndControlBytesSoALogLineCannotBeForged) {
  EXPECT_EQ(QuoteForMessage("node-a"), "\"node-a\"");
  EXPECT_EQ(QuoteForMessage("a\nmetad I 12:00 fake line"), "\"a\\nmetad I 12:00 fake line\"");
  EXPECT_EQ(QuoteForMessage(std::string("x\x1b[2Jy\"\\", 8)), "\"x\\x1b[2Jy\\\"\\\\\"");
}

TEST(QuoteForMessage, CutsLongTextAndSaysHowLongItWas) {
  const std::string huge(60 << 20, 'a');
  const std::string quoted = QuoteForMessage(huge);
  EXPECT_LT(quoted.size(), 200u);
  EXPECT_NE(quoted.find("… (62914560 bytes)"), std::string::npos) << quoted;
}

TEST(CheckName, AcceptsLettersDigitsDashUnderscoreDot) {
  EXPECT_TRUE(CheckName("model name", "llama-3.1_8b").ok());
  EXPECT_FALSE(CheckName("model name", "").ok());
  EXPECT_FALSE(CheckName("model name", std::string(129, 'a')).ok());
  EXPECT_FALSE(CheckName("model name", ".hidden").ok());
  const absl::Status newline = CheckName("node name", "a\nb");
  EXPECT_EQ(newline.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(newline.message(), "node name \"a\\nb\" may hold only letters, digits, '-', '_' and '.'");
}

// Issue 35: an identity is one word that a binding file keeps and reads back as written.
TEST(CheckIdentity, OneWordOfPrintableAsciiWithoutQuotesOrBackslashes) {
  EXPECT_TRUE(CheckIdentity("identity", "token:member:node-b.token").ok());
  EXPECT_TRUE(CheckIdentity("identity", std::string(kMaxIdentityBytes, '~')).ok());
  EXPECT_TRUE(CheckIdentityName("name", "!#$%&'()*+,-./:;<=>?@[]^_`{|}~").ok());
  EXPECT_FALSE(CheckIdentity("identity", std::string(kMaxIdentityBytes + 1, 'a')).ok());
  EXPECT_FALSE(CheckIdentityName("name", std::string(kMaxIdentityNameBytes + 1, 'a')).ok());
  for (const std::string bad : {"", "node b", "a\"b", "a\\b", "a\tb", "a\nb", "caf\xc3\xa9", "a\x7f"}) {
    EXPECT_FALSE(CheckIdentityName("name", bad).ok()) << QuoteForMessage(bad);
  }
  EXPECT_EQ(CheckIdentityName("its file name", "node b.token").message(),
            "its file name \"node b.token\" may hold only printable ASCII characters other than space, '\"' "
            "and '\\'");
}

TEST(CheckAddress, HostPortWithADialablePort) {
  EXPECT_TRUE(CheckAddress("address", "gpu-node-01:7070").ok());
  EXPECT_TRUE(CheckAddress("address", "10.0.0.1:1").ok());
  EXPECT_TRUE(CheckAddress("address", "[fe80::1]:7070").ok());
  EXPECT_FALSE(CheckAddress("address", "node:0").ok());
  EXPECT_TRUE(CheckAddress("listen", "0.0.0.0:0", /*allow_port_zero=*/true).ok());
  EXPECT_FALSE(CheckAddress("address", "node:65536").ok());
  EXPECT_FALSE(CheckAddress("address", "node:+80").ok());
  EXPECT_FALSE(CheckAddress("address", "node").ok());
  EXPECT_FALSE(CheckAddress("address", "no de:7070").ok());
  EXPECT_FALSE(CheckAddress("address", "[fe80::1:7070").ok());
  EXPECT_FALSE(CheckAddress("address", std::string(300, 'a') + ":1").ok());
}

TEST(CheckNormalAbsolutePath, OnlyNormalFormPassesSoPrefixesCompareExactly) {
  EXPECT_TRUE(CheckNormalAbsolutePath("root", "/").ok());
  EXPECT_TRUE(CheckNormalAbsolutePath("root", "/mnt/models").ok());
  for (const char* bad : {"", "models", "/mnt/../etc", "/mnt/./models", "/mnt//models", "/mnt/models/"}) {
    EXPECT_EQ(CheckNormalAbsolutePath("root", bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(CheckNormalAbsolutePath("root", std::string("/a\0b", 4)).ok());
  EXPECT_FALSE(CheckNormalAbsolutePath("root", "/" + std::string(5000, 'a')).ok());
}

// A member's roots and a record's folder on another storage back end: normal form after the
// scheme too, so that one member cannot publish "mem://b/models/.." to cover another's bucket.
TEST(CheckNormalLocation, SchemeLocationsInNormalFormPassAndPosixPathsKeepTheirRules) {
  EXPECT_TRUE(CheckNormalLocation("root", "/mnt/models").ok());
  EXPECT_TRUE(CheckNormalLocation("root", "mem://bucket").ok());
  EXPECT_TRUE(CheckNormalLocation("root", "mem://bucket/models/llama").ok());
  for (const char* bad : {"", "models", "/mnt/../etc", "mem://", "mem://bucket/", "mem://bucket//m",
                          "mem://bucket/../other", "mem://./bucket", "mem:///bucket"}) {
    EXPECT_EQ(CheckNormalLocation("root", bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(CheckNormalLocation("root", "mem://b/..").message(),
            "root \"mem://b/..\" has a '.' or '..' component");
  EXPECT_FALSE(CheckNormalLocation("root", std::string("mem://a\0b", 9)).ok());
  EXPECT_FALSE(CheckNormalLocation("root", "mem://" + std::string(5000, 'a')).ok());
}

TEST(CheckNormalRelativePath, CannotNameAnythingOutsideTheFolder) {
  EXPECT_TRUE(CheckNormalRelativePath("file", "model-00001-of-00002.safetensors").ok());
  EXPECT_TRUE(CheckNormalRelativePath("file", "shards/a.safetensors").ok());
  for (const char* bad : {"", "/etc/shadow", "../../outside/x", "a/../../b", "./a", "a//b"}) {
    EXPECT_EQ(CheckNormalRelativePath("file", bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(IsUnderRoot, ComparesWholeComponents) {
  EXPECT_TRUE(IsUnderRoot("/models/llama/a.safetensors", "/models"));
  EXPECT_TRUE(IsUnderRoot("/models", "/models"));
  EXPECT_FALSE(IsUnderRoot("/models2/a", "/models"));
  EXPECT_FALSE(IsUnderRoot("/mod", "/models"));
  EXPECT_TRUE(IsUnderRoot("/anything", "/"));
}

}  // namespace
}  // namespace metaload
