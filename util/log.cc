#include "util/log.h"

#include <unistd.h>

#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace metaload {
namespace {

std::string& ProgramName() {
  static std::string* name = new std::string("metaload");
  return *name;
}
std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};

}  // namespace

void SetLogProgramName(absl::string_view name) { ProgramName() = std::string(name); }
void SetMinLogLevel(LogLevel level) { min_level = static_cast<int>(level); }

void Log(LogLevel level, absl::string_view message) {
  if (static_cast<int>(level) < min_level.load()) return;
  const char* tag = level == LogLevel::kInfo ? "I" : level == LogLevel::kWarning ? "W" : "E";
  std::string line =
      absl::StrCat(ProgramName(), " ", tag, " ",
                   absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::UTCTimeZone()), " ", message, "\n");
  // One write(2) per line: atomic for lines under PIPE_BUF, never interleaved mid-line.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace metaload
