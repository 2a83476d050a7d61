// Parsing untrusted JSON (safetensors headers, checkpoint indexes) strictly.
//
// nlohmann::json keeps the last value when an object repeats a key; in a safetensors header
// or a weight_map that would silently hide a tensor, so this parser rejects repeated keys.
#ifndef METALOAD_UTIL_JSON_STRICT_JSON_H_
#define METALOAD_UTIL_JSON_STRICT_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace metaload {

// InvalidArgument, without a file name (callers add theirs), on a syntax error
// ("invalid JSON at byte N: syntax error while parsing value - invalid literal": where and what
// kind, never the text there) or on a key repeated inside one object
// ("duplicate key \"k\" in the top-level object" / "... in the object under \"weight_map\"").
// Nesting deeper than kMaxJsonNestingDepth is rejected too ("nested deeper than ..."):
// nlohmann's dump() and comparisons recurse, and a header of 50 million '[' would otherwise
// overflow the stack the first time an error message printed part of it.
inline constexpr int kMaxJsonNestingDepth = 64;
absl::StatusOr<nlohmann::json> ParseJsonRejectingDuplicateKeys(absl::string_view text);

// `value` described for an error message by its kind and size ("a negative integer", "a string
// of 12 bytes", "an array of 3 elements"), never by its content: a file read as a checkpoint's
// header, index or config.json may be a secret put in its place (issue 23), and its values must
// not come back in an error.
std::string JsonForMessage(const nlohmann::json& value);

}  // namespace metaload

#endif  // METALOAD_UTIL_JSON_STRICT_JSON_H_
