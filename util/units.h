// Byte sizes as users write them ("80GiB", "512MB", "1.5TiB", "4096") and as we print them.
#ifndef METALOAD_UTIL_UNITS_H_
#define METALOAD_UTIL_UNITS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace metaload {

inline constexpr uint64_t kKiB = uint64_t{1} << 10;
inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kGiB = uint64_t{1} << 30;

// Accepts an integer or decimal number followed by an optional unit: B, KB, MB, GB, TB
// (powers of 1000), KiB, MiB, GiB, TiB (powers of 1024); case-insensitive; "80G" means
// GiB like nvidia-smi. InvalidArgument on anything else or on overflow of 64 bits.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

// 1536 -> "1.50 KiB"; below 1 KiB "512 B".
std::string FormatBytes(uint64_t size_bytes);

// Checked arithmetic for sizes computed from untrusted input.
bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out);
bool AddOverflows(uint64_t a, uint64_t b, uint64_t* out);

}  // namespace metaload

#endif  // METALOAD_UTIL_UNITS_H_
