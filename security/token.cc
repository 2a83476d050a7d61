#include "security/token.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "absl/strings/str_cat.h"
#include "util/fs/file_io.h"

namespace metaload {

absl::StatusOr<std::string> ReadTokenFile(const std::string& path, absl::string_view what) {
  absl::StatusOr<std::string> text = ReadSmallFile(path, kMaxTokenBytes + 2, "token file");
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", text.status().message()));
  }
  std::string token = std::move(*text);
  while (!token.empty() &&
         (token.back() == '\n' || token.back() == '\r' || token.back() == ' ' || token.back() == '\t')) {
    token.pop_back();
  }
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", path, " is empty"));
  if (token.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the token in ", path, " is longer than ", kMaxTokenBytes, " bytes"));
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the token in ", path, " must be printable ASCII without spaces"));
    }
  }
  return token;
}

bool BearerMatches(absl::string_view header, absl::string_view token) {
  const std::string expected = absl::StrCat(kBearerPrefix, token);
  unsigned char a[SHA256_DIGEST_LENGTH], b[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(header.data()), header.size(), a);
  SHA256(reinterpret_cast<const unsigned char*>(expected.data()), expected.size(), b);
  return CRYPTO_memcmp(a, b, sizeof(a)) == 0;
}

}  // namespace metaload
