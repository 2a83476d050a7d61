// UTF-8 as RFC 3629 defines it: no overlong forms, no surrogates, nothing past U+10FFFF. One
// decoder for every place that checks text from outside: safetensors headers
// (planner/format/safetensors.cc) and the label values metad's /metrics writes
// (daemon/metrics/metrics_text.cc).
#ifndef METALOAD_UTIL_UTF8_H_
#define METALOAD_UTIL_UTF8_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace metaload {

// The length (1 to 4) of the UTF-8 sequence that starts at `text[at]`, or 0 when none valid
// does. REQUIRES: at < text.size().
size_t Utf8SequenceLength(absl::string_view text, size_t at);

bool IsValidUtf8(absl::string_view text);

}  // namespace metaload

#endif  // METALOAD_UTIL_UTF8_H_
