// The one logging facility of metaload (LibTorch's LOG/CHECK macros are left alone).
// Lines go to stderr as "<program> <I|W|E> <UTC time> <message>", one write per line so
// concurrent threads never interleave within a line.
//
//   LogInfo(absl::StrCat("listening on ", address));
#ifndef METALOAD_UTIL_LOG_H_
#define METALOAD_UTIL_LOG_H_

#include "absl/strings/string_view.h"

namespace metaload {

enum class LogLevel { kInfo, kWarning, kError };

// Sets the program name printed on every line (default "metaload"). Call once in main.
void SetLogProgramName(absl::string_view name);
// Lines below `level` are dropped (default kInfo).
void SetMinLogLevel(LogLevel level);

void Log(LogLevel level, absl::string_view message);
inline void LogInfo(absl::string_view message) { Log(LogLevel::kInfo, message); }
inline void LogWarning(absl::string_view message) { Log(LogLevel::kWarning, message); }
inline void LogError(absl::string_view message) { Log(LogLevel::kError, message); }

}  // namespace metaload

#endif  // METALOAD_UTIL_LOG_H_
