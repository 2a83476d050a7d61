// SHA-256 (FIPS 180-4), for load reports: a rank's tensor bytes hashed as loaded, compared
// by tests against hashlib over the source file's bytes.
#ifndef METALOAD_CLIENT_SHA256_H_
#define METALOAD_CLIENT_SHA256_H_

#include <cstdint>
#include <string>

#include "absl/types/span.h"

namespace metaload {

class Sha256 {
 public:
  Sha256();
  void Update(absl::Span<const uint8_t> data);
  // Lowercase hex digest. The object must not be updated afterwards.
  std::string HexDigest();

 private:
  void Block(const uint8_t* block);
  uint32_t state_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t length_bytes_ = 0;
};

std::string Sha256Hex(absl::Span<const uint8_t> data);

}  // namespace metaload

#endif  // METALOAD_CLIENT_SHA256_H_
