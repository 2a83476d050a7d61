#include "util/proc_memory.h"

#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace metaload {
namespace {

// "VmRSS:\t  123456 kB" -> 123456 * 1024.
uint64_t StatusFieldBytes(absl::string_view key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, key) || !absl::ConsumePrefix(&rest, ":")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    if (!absl::ConsumeSuffix(&rest, "kB")) return 0;
    uint64_t kib = 0;
    return absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kib) ? kib * 1024 : 0;
  }
  return 0;
}

}  // namespace

uint64_t ResidentBytes() { return StatusFieldBytes("VmRSS"); }
uint64_t PeakResidentBytes() { return StatusFieldBytes("VmHWM"); }

}  // namespace metaload
