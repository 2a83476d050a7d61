#include "security/token.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "absl/strings/str_cat.h"
#include "util/fs/file_io.h"
#include "util/fs/storage.h"

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

BearerDigest HeaderDigest(absl::string_view header) {
  static_assert(sizeof(BearerDigest) == SHA256_DIGEST_LENGTH);
  BearerDigest out;
  SHA256(reinterpret_cast<const unsigned char*>(header.data()), header.size(), out.data());
  return out;
}

BearerDigest TokenDigest(absl::string_view token) { return HeaderDigest(absl::StrCat(kBearerPrefix, token)); }

bool SameDigest(const BearerDigest& a, const BearerDigest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool BearerMatches(absl::string_view header, absl::string_view token) {
  return SameDigest(HeaderDigest(header), TokenDigest(token));
}

}  // namespace metaload
