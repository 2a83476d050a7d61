// XXH3-64, the per-tensor digest a daemon records at `register --digest` and a rank checks
// the bytes it read against (docs/integrity.md). A thin seam over Debian's libxxhash, so that
// no other file sees its header and only this library links it.
//
//   uint64_t digest = Xxh3(bytes);              // one buffer
//   Xxh3Stream s; s.Update(a); s.Update(b);     // s.Digest() == Xxh3(a followed by b)
//
// Thread-safety: Xxh3 is; an Xxh3Stream is used by one thread at a time.
#ifndef METALOAD_UTIL_XXH3_H_
#define METALOAD_UTIL_XXH3_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/types/span.h"

namespace metaload {

// XXH3_64bits with seed 0: Xxh3({}) == 0x2D06800538D394C2.
uint64_t Xxh3(absl::Span<const uint8_t> data);
// XXH3_64bits_withSeed: the fast tile digest's term (util/hash/tile_digest.h).
uint64_t Xxh3Seeded(absl::Span<const uint8_t> data, uint64_t seed);

// The same digest over bytes that arrive in pieces.
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;

  void Update(absl::Span<const uint8_t> data);
  uint64_t Digest() const;
  void Reset();  // as newly made

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// "0x2d06800538d394c2": how digests appear in messages.
std::string Xxh3Hex(uint64_t digest);

}  // namespace metaload

#endif  // METALOAD_UTIL_XXH3_H_
