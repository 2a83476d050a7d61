// The bounded XML reader of S3's list and error bodies, against what S3 sends and what a
// hostile server could.
#include "util/fs/s3/s3_xml.h"

#include <gtest/gtest.h>

#include <string>

namespace metaload {
namespace {

constexpr char kPage[] = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>models</Name><Prefix>llama/</Prefix>
<KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys><Delimiter>/</Delimiter><IsTruncated>true</IsTruncated>
<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
<Contents><Key>llama/config.json</Key><LastModified>2026-12-06T15:11:43.000Z</LastModified>
<ETag>&quot;5d41402abc4b2a76b9719d911017c592&quot;</ETag><Size>5</Size><StorageClass>STANDARD</StorageClass></Contents>
<Contents><Key>llama/a &amp; b&#x20AC;.safetensors</Key><Size>18446744073709551615</Size></Contents>
<CommonPrefixes><Prefix>llama/sub/</Prefix></CommonPrefixes></ListBucketResult>)";

TEST(S3Xml, ListPage) {
  absl::StatusOr<S3ListPage> page = ParseListObjectsV2(kPage, "llama/");
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].key, "llama/config.json");
  EXPECT_EQ(page->objects[0].size_bytes, 5u);
  EXPECT_EQ(page->objects[1].key, "llama/a & b\xe2\x82\xac.safetensors");
  EXPECT_EQ(page->objects[1].size_bytes, UINT64_MAX);
  EXPECT_EQ(page->common_prefixes, std::vector<std::string>{"llama/sub/"});
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_continuation_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
}

TEST(S3Xml, EmptyPageAndSelfClosing) {
  absl::StatusOr<S3ListPage> page = ParseListObjectsV2(
      "<ListBucketResult><Prefix/><IsTruncated>false</IsTruncated></ListBucketResult>", "");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_TRUE(page->objects.empty());
  EXPECT_FALSE(page->truncated);
}

std::string Wrap(const std::string& inner) { return "<ListBucketResult>" + inner + "</ListBucketResult>"; }

TEST(S3Xml, HostileListBodies) {
  const std::string object = "<Contents><Key>p/a</Key><Size>1</Size></Contents>";
  struct Case {
    std::string body, message;
  } cases[] = {
      {"", "malformed S3 response: the document ends inside an element, or has none"},
      {"<Error/>", "malformed S3 response: no <ListBucketResult>"},
      {Wrap("<Contents><Key>p/a</Key><Size>-1</Size></Contents>"),
       "malformed S3 response: an object size that is no decimal 64-bit count"},
      {Wrap("<Contents><Key>p/a</Key><Size>18446744073709551616</Size></Contents>"),
       "malformed S3 response: an object size that is no decimal 64-bit count"},
      {Wrap("<Contents><Key>p/a</Key><Size>+1</Size></Contents>"),
       "malformed S3 response: an object size that is no decimal 64-bit count"},
      {Wrap("<Contents><Key>p/a</Key></Contents>"), "malformed S3 response: an object without Key or Size"},
      {Wrap("<Contents><Key>q/a</Key><Size>1</Size></Contents>"),
       "malformed S3 response: an object key outside the prefix listed, or longer than 1024 bytes"},
      {Wrap("<Contents><Key>p/" + std::string(1100, 'k') + "</Key><Size>1</Size></Contents>"),
       "malformed S3 response: an object key outside the prefix listed, or longer than 1024 bytes"},
      {Wrap("<CommonPrefixes><Prefix>other/</Prefix></CommonPrefixes>"),
       "malformed S3 response: a common prefix outside the prefix listed, or longer than 1024 bytes"},
      {Wrap("<IsTruncated>true</IsTruncated>"),
       "malformed S3 response: a truncated page without NextContinuationToken"},
      {Wrap("<IsTruncated>yes</IsTruncated>"), "malformed S3 response: IsTruncated neither true nor false"},
      {Wrap("<Key>&bogus;</Key>"), "malformed S3 response: an unknown entity"},
      {Wrap("<Key>&#0;</Key>"), "malformed S3 response: a character reference out of range"},
      {Wrap("<Key>&#xD800;</Key>"), "malformed S3 response: a character reference out of range"},
      {Wrap("<Key>&#x110000;</Key>"), "malformed S3 response: a character reference out of range"},
      {Wrap("<Key>&amp</Key>"), "malformed S3 response: an unterminated reference"},
      {"<!DOCTYPE x [<!ENTITY a \"aaaa\">]>" + Wrap(""), "malformed S3 response: a DOCTYPE or CDATA section"},
      {Wrap("<![CDATA[x]]>"), "malformed S3 response: a DOCTYPE or CDATA section"},
      {Wrap("<a></b>"), "malformed S3 response: a closing tag that matches no open one"},
      {Wrap("") + Wrap(""), "malformed S3 response: more than one root element"},
      {"<ListBucketResult>", "malformed S3 response: the document ends inside an element, or has none"},
      {Wrap("<a"), "malformed S3 response: an unterminated tag"},
      {"junk" + Wrap(""), "malformed S3 response: text outside the root element"},
      {Wrap("<Key>" + std::string(9000, 'x') + "</Key>"),
       "malformed S3 response: an element's text is too long"},
      {Wrap("<" + std::string(65, 'n') + "/>"),
       "malformed S3 response: an element name that is empty or too long"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<S3ListPage> page = ParseListObjectsV2(c.body, "p/");
    EXPECT_EQ(page.status().code(), absl::StatusCode::kDataLoss) << c.body.substr(0, 80);
    EXPECT_EQ(page.status().message(), c.message) << c.body.substr(0, 80);
  }
}

TEST(S3Xml, BoundsOnDepthElementsEntriesAndBytes) {
  std::string deep;
  for (int i = 0; i < 17; ++i) deep += "<d>";
  EXPECT_EQ(ParseListObjectsV2(deep, "").status().message(), "malformed S3 response: deeper than 16 levels");
  std::string many = "<ListBucketResult>";
  for (int i = 0; i < 20001; ++i) many += "<x/>";
  EXPECT_EQ(ParseListObjectsV2(many + "</ListBucketResult>", "").status().message(),
            "malformed S3 response: more than 20000 elements");
  std::string entries = "<ListBucketResult>";
  for (int i = 0; i < 1001; ++i) entries += "<Contents><Key>k</Key><Size>1</Size></Contents>";
  EXPECT_EQ(ParseListObjectsV2(entries + "</ListBucketResult>", "").status().message(),
            "malformed S3 response: more than 1000 entries in one page");
  EXPECT_EQ(ParseListObjectsV2(std::string(kMaxS3XmlBytes + 1, ' '), "").status().message(),
            "malformed S3 response: more than 16777216 bytes");
}

TEST(S3Xml, ErrorBodyKeepsCodeAndMessageOnly) {
  const S3ErrorBody error = ParseS3Error(
      "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we "
      "calculated "
      "does not match\x01</Message><StringToSign>AWS4-HMAC-SHA256...</StringToSign><SignatureProvided>"
      "deadbeef</SignatureProvided></Error>");
  EXPECT_EQ(error.code, "SignatureDoesNotMatch");
  EXPECT_EQ(error.message, "The request signature we calculated does not match?");
  EXPECT_EQ(ParseS3Error("<html>502 Bad Gateway</html").code, "");
  EXPECT_EQ(ParseS3Error("").code, "");
  EXPECT_EQ(ParseS3Error("<Error><Message>" + std::string(300, 'm') + "</Message></Error>").message.size(),
            200u);
}

}  // namespace
}  // namespace metaload
