#include "util/hash/xxh3.h"

#include <xxhash.h>

#include "absl/strings/str_format.h"

namespace metaload {

// Allocated by the library (it is opaque without XXH_STATIC_LINKING_ONLY, which would tie this
// file to the layout of one libxxhash version).
struct Xxh3Stream::State {
  State() : xxh(XXH3_createState()) {}
  ~State() { XXH3_freeState(xxh); }
  XXH3_state_t* xxh;
};

uint64_t Xxh3(absl::Span<const uint8_t> data) { return XXH3_64bits(data.data(), data.size()); }

uint64_t Xxh3Seeded(absl::Span<const uint8_t> data, uint64_t seed) {
  return XXH3_64bits_withSeed(data.data(), data.size(), seed);
}

Xxh3Stream::Xxh3Stream() : state_(std::make_unique<State>()) { Reset(); }
Xxh3Stream::~Xxh3Stream() = default;

void Xxh3Stream::Update(absl::Span<const uint8_t> data) {
  XXH3_64bits_update(state_->xxh, data.data(), data.size());
}

uint64_t Xxh3Stream::Digest() const { return XXH3_64bits_digest(state_->xxh); }

void Xxh3Stream::Reset() { XXH3_64bits_reset(state_->xxh); }

std::string Xxh3Hex(uint64_t digest) { return absl::StrFormat("0x%016x", digest); }

}  // namespace metaload
