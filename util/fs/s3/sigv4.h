// AWS Signature Version 4 for S3 requests: the canonical request, the string to sign, the
// signing key and the Authorization header, each a pure function so that tests check every
// step against AWS's published test suite (tests/util/fs/s3/sigv4_test.cc). The secret goes
// into SigningKey only; nothing here returns it or puts it in a message.
//
//   SigV4Request request{"GET", "/bucket/model.safetensors", {}, {{"host", "127.0.0.1:9000"},
//                        {"range", "bytes=0-99"}, {"x-amz-content-sha256", kEmptyPayloadSha256},
//                        {"x-amz-date", "20261206T150000Z"}}, kEmptyPayloadSha256};
//   const std::string authorization = Authorization(request, keys, "us-east-1", "s3");
//
// Thread-safety: pure functions.
#ifndef METALOAD_UTIL_FS_S3_SIGV4_H_
#define METALOAD_UTIL_FS_S3_SIGV4_H_

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace metaload {

// SHA-256 of no bytes, in hex: the payload hash of every GET and HEAD.
inline constexpr absl::string_view kEmptyPayloadSha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

struct SigV4Request {
  std::string method;  // "GET", "HEAD"
  // The path as sent, not yet encoded ("/bucket/a b/c"): each segment is URI-encoded, '/' kept,
  // as S3 wants (no double encoding, no dot-segment folding).
  std::string path;
  std::vector<std::pair<std::string, std::string>> query;    // raw keys and values
  std::vector<std::pair<std::string, std::string>> headers;  // every header signed; "host" among them
  std::string payload_sha256_hex;
};

struct SigV4Keys {
  std::string access_key_id;
  std::string secret_access_key;
};

// RFC 3986 percent-encoding as SigV4 spells it: unreserved characters (A-Z a-z 0-9 - . _ ~) as
// they are, every other byte %XX (upper hex); '/' kept when `keep_slash`.
std::string UriEncode(absl::string_view bytes, bool keep_slash);
// "k1=v1&k2=v2", keys and values encoded, sorted by key then value: the canonical query string,
// which is also the query the request sends, so that both are one spelling.
std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query);
// "host;range;x-amz-date": the header names, lower case, sorted, each once.
std::string SignedHeaders(const std::vector<std::pair<std::string, std::string>>& headers);
// METHOD \n URI \n QUERY \n name:value\n... \n SIGNED \n PAYLOAD-HASH. Header values trimmed,
// inner runs of spaces made one; several values of one name joined by ',' in their order.
std::string CanonicalRequest(const SigV4Request& request);
// "20150830/us-east-1/service/aws4_request" for an x-amz-date of "20150830T123600Z".
std::string CredentialScope(absl::string_view amz_date, absl::string_view region, absl::string_view service);
// "AWS4-HMAC-SHA256" \n DATE \n SCOPE \n hex(SHA-256(canonical request)).
std::string StringToSign(absl::string_view amz_date, absl::string_view scope,
                         absl::string_view canonical_request);
// HMAC chain "AWS4"+secret -> date (YYYYMMDD) -> region -> service -> "aws4_request".
std::array<uint8_t, 32> SigningKey(absl::string_view secret_access_key, absl::string_view date,
                                   absl::string_view region, absl::string_view service);
// Lowercase hex of HMAC-SHA256(signing key, string to sign).
std::string Signature(const std::array<uint8_t, 32>& signing_key, absl::string_view string_to_sign);
// The whole Authorization header value for `request`, whose headers hold its "x-amz-date".
// "AWS4-HMAC-SHA256 Credential=AKID/SCOPE, SignedHeaders=..., Signature=...".
std::string Authorization(const SigV4Request& request, const SigV4Keys& keys, absl::string_view region,
                          absl::string_view service);

// Lowercase hex SHA-256 of `bytes`.
std::string Sha256HexOf(absl::string_view bytes);

}  // namespace metaload

#endif  // METALOAD_UTIL_FS_S3_SIGV4_H_
