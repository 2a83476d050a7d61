#include "util/log.h"

#include <unistd.h>

#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"

namespace metaload {
namespace {

std::string& ProgramName() {
  static std::string* name = new std::string("metaload");
  return *name;
}
std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> log_format{static_cast<int>(LogFormat::kText)};

// A message as one text line: control bytes (a newline in a name would forge a second line, an
// escape sequence would rewrite the terminal) become escapes; the rest is kept as it is.
void AppendTextMessage(absl::string_view message, std::string* out) {
  for (const char c : message) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '\n') {
      *out += "\\n";
    } else if (c == '\r') {
      *out += "\\r";
    } else if (c == '\t') {
      *out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      absl::StrAppend(out, absl::StrFormat("\\x%02x", u));
    } else {
      *out += c;
    }
  }
}

const char* LevelName(LogLevel level) {
  return level == LogLevel::kInfo ? "info" : level == LogLevel::kWarning ? "warning" : "error";
}

std::string JsonLine(absl::string_view program, LogLevel level, absl::Time when, absl::string_view message,
                     absl::Span<const LogField> fields) {
  // ordered_json: ts, level, program and msg first, then the fields in the order given.
  nlohmann::ordered_json line;
  line["ts"] = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", when, absl::UTCTimeZone());
  line["level"] = LevelName(level);
  line["program"] = std::string(program);
  line["msg"] = std::string(message);
  for (const LogField& field : fields) {
    std::visit([&](const auto& value) { line[field.key] = value; }, field.value);
  }
  // replace: bytes that are not UTF-8 become U+FFFD instead of an exception; control
  // characters and quotes are escaped as JSON requires.
  return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

void SetLogProgramName(absl::string_view name) { ProgramName() = std::string(name); }
void SetMinLogLevel(LogLevel level) { min_level = static_cast<int>(level); }
void SetLogFormat(LogFormat format) { log_format = static_cast<int>(format); }

std::string FormatLogLine(LogFormat format, absl::string_view program, LogLevel level, absl::Time when,
                          absl::string_view message, absl::Span<const LogField> fields) {
  if (format == LogFormat::kJson) return absl::StrCat(JsonLine(program, level, when, message, fields), "\n");
  const char* tag = level == LogLevel::kInfo ? "I" : level == LogLevel::kWarning ? "W" : "E";
  std::string line =
      absl::StrCat(program, " ", tag, " ", absl::FormatTime("%H:%M:%E3S", when, absl::UTCTimeZone()), " ");
  AppendTextMessage(message, &line);
  line += "\n";
  return line;
}

void Log(LogLevel level, absl::string_view message, absl::Span<const LogField> fields) {
  if (static_cast<int>(level) < min_level.load()) return;
  const std::string line = FormatLogLine(static_cast<LogFormat>(log_format.load()), ProgramName(), level,
                                         absl::Now(), message, fields);
  // One write(2) per line: atomic for lines under PIPE_BUF, never interleaved mid-line.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace metaload
