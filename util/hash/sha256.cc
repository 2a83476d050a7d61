#include "util/hash/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>

namespace metaload {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  // Allocation failure or a libcrypto without SHA-256 leaves nothing sensible to report.
  if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) std::abort();
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::Update(absl::Span<const uint8_t> data) {
  if (!data.empty() && EVP_DigestUpdate(ctx_, data.data(), data.size()) != 1) std::abort();
}

std::string Sha256::HexDigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx_, digest, &length) != 1) std::abort();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 0xf]);
  }
  return out;
}

std::string Sha256Hex(absl::Span<const uint8_t> data) {
  Sha256 sha;
  sha.Update(data);
  return sha.HexDigest();
}

}  // namespace metaload
