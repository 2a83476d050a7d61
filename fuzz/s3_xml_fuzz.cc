// ParseListObjectsV2 and ParseS3Error (util/fs/s3/s3_xml.h): an S3 server's list and error
// bodies, which come from the network. The first byte picks how long the prefix asked for is,
// cut from the rest. Besides crashes and UB it aborts when an accepted page breaks what the
// parser promises: a key or common prefix outside the prefix or over 1,024 bytes, more than
// 1,000 entries, a truncated page without a token; or an error's message over 200 bytes or
// with a byte that is not printable ASCII.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "util/fs/s3/s3_xml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string prefix = rest.substr(0, std::min<size_t>(data[0] % 8, rest.size()));
  const std::string body = rest.substr(prefix.size());
  absl::StatusOr<metaload::S3ListPage> page = metaload::ParseListObjectsV2(body, prefix);
  if (page.ok()) {
    if (page->objects.size() + page->common_prefixes.size() > metaload::kMaxS3ListEntries) std::abort();
    if (page->truncated == page->next_continuation_token.empty()) std::abort();
    for (const metaload::S3ObjectEntry& o : page->objects) {
      if (!absl::StartsWith(o.key, prefix) || o.key.size() > 1024) std::abort();
    }
    for (const std::string& p : page->common_prefixes) {
      if (!absl::StartsWith(p, prefix) || p.size() > 1024) std::abort();
    }
  }
  const metaload::S3ErrorBody error = metaload::ParseS3Error(body);
  for (const std::string* text : {&error.code, &error.message}) {
    if (text->size() > 200) std::abort();
    for (char c : *text) {
      if (c < ' ' || c > '~') std::abort();
    }
  }
  return 0;
}
