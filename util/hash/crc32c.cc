#include "util/hash/crc32c.h"

#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#endif

namespace metaload {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;  // CRC-32C, bit-reversed

// The three interleaved streams each take kStreamBytes per round: long enough that the two
// shifts that join them cost little, short enough for a 1 MiB chunk to be mostly rounds.
constexpr size_t kStreamBytes = 8192;

struct Tables {
  uint32_t byte[256];      // the software fallback, one byte at a time
  uint32_t shift[4][256];  // the register after kStreamBytes zero bytes, by each byte of it
  bool hardware = false;
};

uint32_t SoftwareRaw(uint32_t crc, const uint8_t* p, size_t n, const uint32_t* table) {
  while (n-- > 0) crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
// Compiled for SSE4.2 by this attribute alone rather than -msse4.2 on the file: a flag would let
// the compiler use SSE4.2 in any code of the file, including inline functions from headers that
// the linker may then pick for the whole program; here only these functions are, and they run
// only after cpuid said yes.
__attribute__((target("sse4.2"))) uint32_t HardwareRaw(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

// The instruction has a latency of three cycles and a throughput of one: three independent
// streams keep it busy. Stream a continues `crc`; b and c start from 0 and are joined after
// each round by shifting the earlier ones past the later ones' bytes (CRC is linear).
__attribute__((target("sse4.2"))) uint32_t HardwareRaw3(uint32_t crc, const uint8_t* p, size_t n,
                                                        const uint32_t (*shift)[256]) {
  auto shifted = [shift](uint32_t x) {
    return shift[0][x & 0xff] ^ shift[1][(x >> 8) & 0xff] ^ shift[2][(x >> 16) & 0xff] ^ shift[3][x >> 24];
  };
  for (; n >= 3 * kStreamBytes; p += 3 * kStreamBytes, n -= 3 * kStreamBytes) {
    uint64_t a = crc, b = 0, c = 0;
    for (size_t i = 0; i < kStreamBytes; i += 8) {
      uint64_t x, y, z;
      std::memcpy(&x, p + i, 8);
      std::memcpy(&y, p + kStreamBytes + i, 8);
      std::memcpy(&z, p + 2 * kStreamBytes + i, 8);
      a = _mm_crc32_u64(a, x);
      b = _mm_crc32_u64(b, y);
      c = _mm_crc32_u64(c, z);
    }
    crc = shifted(shifted(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b)) ^ static_cast<uint32_t>(c);
  }
  return HardwareRaw(crc, p, n);
}

bool CpuHasSse42() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_SSE4_2) != 0;
}
#else
bool CpuHasSse42() { return false; }
#endif

Tables MakeTables() {
  Tables t;
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (kPolynomial & (0u - (crc & 1)));
    t.byte[b] = crc;
  }
  t.hardware = CpuHasSse42();
  // The register after kStreamBytes zeros is linear in the register before: find the image of
  // each bit, then of each value of each byte.
  static const uint8_t kZeros[kStreamBytes] = {};
  uint32_t image[32];
  for (int bit = 0; bit < 32; ++bit) image[bit] = SoftwareRaw(1u << bit, kZeros, kStreamBytes, t.byte);
  for (int k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t v = 0;
      for (int bit = 0; bit < 8; ++bit) {
        if ((b >> bit) & 1) v ^= image[8 * k + bit];
      }
      t.shift[k][b] = v;
    }
  }
  return t;
}

const Tables& GetTables() {
  static const Tables tables = MakeTables();
  return tables;
}

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, absl::Span<const uint8_t> data) {
  const Tables& t = GetTables();
  uint32_t raw = ~crc;
#if defined(__x86_64__)
  if (t.hardware) return ~HardwareRaw3(raw, data.data(), data.size(), t.shift);
#endif
  return ~SoftwareRaw(raw, data.data(), data.size(), t.byte);
}

bool Crc32cUsesHardware() { return GetTables().hardware; }

uint32_t Crc32cExtendPortable(uint32_t crc, absl::Span<const uint8_t> data) {
  return ~SoftwareRaw(~crc, data.data(), data.size(), GetTables().byte);
}

}  // namespace metaload
