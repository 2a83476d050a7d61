// The one logging facility of metaload (LibTorch's LOG/CHECK macros are left alone).
// Lines go to stderr, one write per line so concurrent threads never interleave within a line,
// in one of two formats (docs/running-a-cluster.md, "Logs", lists the lines metad writes):
//   text (default)  "<program> <I|W|E> <UTC time> <message>"
//   json            one object per line: {"ts":"2026-12-06T11:47:58.890Z","level":"info",
//                   "program":"metad","msg":"<message>", <the line's fields>}
// Whatever a message holds (a hostile name, a path with a newline, bytes that are not UTF-8),
// a line stays one line: text escapes control characters, JSON escapes them and replaces
// invalid UTF-8 with U+FFFD (nlohmann-json's writer).
//
//   LogInfo(absl::StrCat("listening on ", address));
//   Log(LogLevel::kInfo, "load ended: ...", {{"event", "load_end"}, {"model", name}, {"bytes", n}});
#ifndef METALOAD_UTIL_LOG_H_
#define METALOAD_UTIL_LOG_H_

#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace metaload {

enum class LogLevel { kInfo, kWarning, kError };
enum class LogFormat { kText, kJson };

// One structured field of a line: what a log shipper indexes. Only the JSON format writes
// them; the text line's message says the same in words. Keys are fixed by the code (never
// from outside) and are none of ts, level, program, msg.
struct LogField {
  using Value = std::variant<std::string, int64_t, uint64_t, double, bool>;
  LogField(absl::string_view field_key, absl::string_view text) : key(field_key), value(std::string(text)) {}
  LogField(absl::string_view field_key, const char* text) : key(field_key), value(std::string(text)) {}
  LogField(absl::string_view field_key, const std::string& text) : key(field_key), value(text) {}
  LogField(absl::string_view field_key, double number) : key(field_key), value(number) {}
  LogField(absl::string_view field_key, bool flag) : key(field_key), value(flag) {}
  template <typename Integer,
            std::enable_if_t<std::is_integral_v<Integer> && !std::is_same_v<Integer, bool>, int> = 0>
  LogField(absl::string_view field_key, Integer number) : key(field_key) {
    if constexpr (std::is_signed_v<Integer>) {
      value = static_cast<int64_t>(number);
    } else {
      value = static_cast<uint64_t>(number);
    }
  }

  std::string key;
  Value value;
};

// Sets the program name printed on every line (default "metaload"). Call once in main.
void SetLogProgramName(absl::string_view name);
// Lines below `level` are dropped (default kInfo).
void SetMinLogLevel(LogLevel level);
// Default kText; metad sets its node config's log_format once the config is read.
void SetLogFormat(LogFormat format);

void Log(LogLevel level, absl::string_view message, absl::Span<const LogField> fields = {});
inline void LogInfo(absl::string_view message) { Log(LogLevel::kInfo, message); }
inline void LogWarning(absl::string_view message) { Log(LogLevel::kWarning, message); }
inline void LogError(absl::string_view message) { Log(LogLevel::kError, message); }

// The line Log writes, "\n" included: pure, for tests and the fuzz target (fuzz/log_line_fuzz.cc).
std::string FormatLogLine(LogFormat format, absl::string_view program, LogLevel level, absl::Time when,
                          absl::string_view message, absl::Span<const LogField> fields = {});

}  // namespace metaload

#endif  // METALOAD_UTIL_LOG_H_
