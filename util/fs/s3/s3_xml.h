// The two S3 response bodies a reader parses — a ListObjectsV2 page and an error — with a small
// XML reader bounded in every dimension, since the body comes from the network: at most
// kMaxS3XmlBytes, 16 levels, 20,000 elements, 8 KiB of text per element, 1,000 entries a page
// (S3's own max-keys); no DOCTYPE, no CDATA, no entities but the five predefined and numeric
// references. Every number is checked (a size is a decimal uint64), every key must lie under
// the prefix that was asked for.
//
//   ML_ASSIGN_OR_RETURN(S3ListPage page, ParseListObjectsV2(body, "llama/"));
//   for (const S3ObjectEntry& object : page.objects) ...   // keys under "llama/"
//
// Thread-safety: pure functions.
#ifndef METALOAD_UTIL_FS_S3_S3_XML_H_
#define METALOAD_UTIL_FS_S3_S3_XML_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace metaload {

inline constexpr size_t kMaxS3XmlBytes = size_t{16} << 20;
inline constexpr size_t kMaxS3ListEntries = 1000;

struct S3ObjectEntry {
  std::string key;
  uint64_t size_bytes = 0;
};

struct S3ListPage {
  std::vector<S3ObjectEntry> objects;
  std::vector<std::string> common_prefixes;
  bool truncated = false;
  std::string next_continuation_token;  // non-empty when truncated
};

// A ListObjectsV2 answer (<ListBucketResult>) to a request for `prefix`. DataLoss "malformed
// S3 list response: ..." for anything out of bounds or out of shape.
absl::StatusOr<S3ListPage> ParseListObjectsV2(absl::string_view body, absl::string_view prefix);

struct S3ErrorBody {
  std::string code;     // "NoSuchKey", "SignatureDoesNotMatch"; "" when the body is not one
  std::string message;  // at most 200 printable characters
};

// An <Error> body's Code and Message only: the rest (S3 echoes the string to sign, the
// signature provided, the canonical request) is never kept, so it cannot reach a message.
S3ErrorBody ParseS3Error(absl::string_view body);

}  // namespace metaload

#endif  // METALOAD_UTIL_FS_S3_S3_XML_H_
