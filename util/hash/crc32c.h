// CRC-32C (Castagnoli), the checksum every ReadRange chunk carries end to end (docs/integrity.md).
//
//   uint32_t crc = Crc32c(payload);                    // one buffer
//   crc = Crc32cExtend(Crc32cExtend(0, a), b);         // == Crc32c(a followed by b)
//
// Chosen over xxh3 by measurement on 1 MiB chunks (commit message, docs/integrity.md): with
// the SSE4.2 instruction over three interleaved streams it is the faster of the two here.
// Machines without SSE4.2 (checked once at run time, cpuid) get a table-driven fallback with
// the same values. Thread-safe.
#ifndef METALOAD_UTIL_CRC32C_H_
#define METALOAD_UTIL_CRC32C_H_

#include <cstdint>

#include "absl/types/span.h"

namespace metaload {

// The CRC-32C of `data` appended to bytes whose CRC-32C is `crc` (0 for none), as LevelDB's
// crc32c::Extend: Crc32cExtend(0, "123456789") == 0xE3069283.
uint32_t Crc32cExtend(uint32_t crc, absl::Span<const uint8_t> data);
inline uint32_t Crc32c(absl::Span<const uint8_t> data) { return Crc32cExtend(0, data); }

// Whether the SSE4.2 instruction is used on this machine (the benchmarks report it).
bool Crc32cUsesHardware();

// The table-driven fallback alone, whatever the machine has: tests compare it with the above.
uint32_t Crc32cExtendPortable(uint32_t crc, absl::Span<const uint8_t> data);

}  // namespace metaload

#endif  // METALOAD_UTIL_CRC32C_H_
