#include "util/units.h"

#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace metaload {

bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }
bool AddOverflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_add_overflow(a, b, out); }

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  size_t digits_end = 0;
  while (digits_end < s.size() && (absl::ascii_isdigit(s[digits_end]) || s[digits_end] == '.')) ++digits_end;
  absl::string_view number = s.substr(0, digits_end);
  std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(s.substr(digits_end)));
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad size \"", text, "\": ", why, " (write e.g. 80GiB, 512MiB, 1.5TB or a number of bytes)"));
  };
  if (number.empty()) return bad("no number");
  uint64_t multiplier = 1;
  if (unit.empty() || unit == "b")
    multiplier = 1;
  else if (unit == "kb")
    multiplier = 1000ull;
  else if (unit == "mb")
    multiplier = 1000ull * 1000;
  else if (unit == "gb")
    multiplier = 1000ull * 1000 * 1000;
  else if (unit == "tb")
    multiplier = 1000ull * 1000 * 1000 * 1000;
  else if (unit == "kib" || unit == "k")
    multiplier = 1ull << 10;
  else if (unit == "mib" || unit == "m")
    multiplier = 1ull << 20;
  else if (unit == "gib" || unit == "g")
    multiplier = 1ull << 30;
  else if (unit == "tib" || unit == "t")
    multiplier = 1ull << 40;
  else
    return bad(absl::StrCat("unknown unit \"", unit, "\""));

  if (number.find('.') == absl::string_view::npos) {
    uint64_t value = 0, result = 0;
    if (!absl::SimpleAtoi(number, &value)) return bad("not a number");
    if (MulOverflows(value, multiplier, &result)) return bad("does not fit in 64 bits");
    return result;
  }
  double value = 0;
  if (!absl::SimpleAtod(number, &value) || !std::isfinite(value)) return bad("not a number");
  double bytes = std::floor(value * static_cast<double>(multiplier));
  if (bytes >= 18446744073709551615.0) return bad("does not fit in 64 bits");
  return static_cast<uint64_t>(bytes);
}

std::string FormatBytes(uint64_t size_bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (size_bytes < 1024) return absl::StrCat(size_bytes, " B");
  double value = static_cast<double>(size_bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  return absl::StrFormat("%.2f %s", value, kUnits[unit]);
}

}  // namespace metaload
