// What a chunk checksum costs: GB/s of each candidate over 1 MiB chunks, hot (the chunk just
// read, still in cache, as in the daemon and the rank) and cold (16 MiB of chunks in turn).
// The median of 7 rounds each. xxh3 is measured only when the build found libxxhash
// (Debian libxxhash-dev); it is not a dependency of metaload (docs/integrity.md: why CRC-32C).
//
//   build/tests/bench_checksum
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "util/hash/crc32c.h"
#include "util/hash/sha256.h"
#ifdef METALOAD_BENCH_XXH3
#include <xxhash.h>
#endif

namespace metaload {
namespace {

constexpr size_t kChunkBytes = 1 << 20;

double MedianGbps(const std::function<uint64_t(const uint8_t*, size_t)>& hash,
                  const std::vector<uint8_t>& data, bool hot, int chunks_per_round) {
  std::vector<double> rounds;
  volatile uint64_t sink = 0;
  for (int r = 0; r < 7; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int c = 0; c < chunks_per_round; ++c) {
      const size_t at = hot ? 0 : (c % (data.size() / kChunkBytes)) * kChunkBytes;
      sink = sink + hash(data.data() + at, kChunkBytes);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rounds.push_back(chunks_per_round * double(kChunkBytes) / s / 1e9);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

}  // namespace
}  // namespace metaload

int main() {
  using namespace metaload;
  std::vector<uint8_t> data(16 * kChunkBytes);
  uint32_t x = 1;
  for (uint8_t& b : data) b = static_cast<uint8_t>((x = x * 1103515245 + 12345) >> 16);
  struct Candidate {
    std::string name;
    std::function<uint64_t(const uint8_t*, size_t)> hash;
    int chunks;
  };
  std::vector<Candidate> candidates = {
      {Crc32cUsesHardware() ? "crc32c (SSE4.2, 3 streams)" : "crc32c (no SSE4.2: table)",
       [](const uint8_t* p, size_t n) { return uint64_t{Crc32c(absl::MakeConstSpan(p, n))}; }, 400},
      {"crc32c table fallback",
       [](const uint8_t* p, size_t n) {
         return uint64_t{Crc32cExtendPortable(0, absl::MakeConstSpan(p, n))};
       },
       20},
      {"sha256 (OpenSSL)",
       [](const uint8_t* p, size_t n) { return uint64_t{Sha256Hex(absl::MakeConstSpan(p, n)).size()}; }, 40},
#ifdef METALOAD_BENCH_XXH3
      {"xxh3-64 (libxxhash)", [](const uint8_t* p, size_t n) { return uint64_t{XXH3_64bits(p, n)}; }, 400},
#endif
  };
  std::printf("%-30s %12s %12s\n", "GB/s on 1 MiB chunks", "hot", "cold");
  for (const Candidate& c : candidates) {
    std::printf("%-30s %12.1f %12.1f\n", c.name.c_str(), MedianGbps(c.hash, data, true, c.chunks),
                MedianGbps(c.hash, data, false, c.chunks));
  }
  return 0;
}
