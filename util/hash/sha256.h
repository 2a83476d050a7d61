// SHA-256 for load reports: a rank's tensor bytes hashed as loaded, compared by tests against
// hashlib over the source file's bytes. OpenSSL's implementation (SHA-NI where the CPU has
// it): the hand-written one ran at ~230 MB/s, seconds per GiB of report.
#ifndef METALOAD_UTIL_SHA256_H_
#define METALOAD_UTIL_SHA256_H_

#include <cstdint>
#include <string>

#include "absl/types/span.h"

typedef struct evp_md_ctx_st EVP_MD_CTX;

namespace metaload {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(absl::Span<const uint8_t> data);
  // Lowercase hex digest. The object must not be updated afterwards.
  std::string HexDigest();

 private:
  EVP_MD_CTX* ctx_;
};

std::string Sha256Hex(absl::Span<const uint8_t> data);

}  // namespace metaload

#endif  // METALOAD_UTIL_SHA256_H_
