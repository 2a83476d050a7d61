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
// ("invalid JSON: <where and why>") or on a key repeated inside one object
// ("duplicate key \"k\" in the top-level object" / "... in the object under \"weight_map\"").
// Nesting deeper than kMaxJsonNestingDepth is rejected too ("nested deeper than ..."):
// nlohmann's dump() and comparisons recurse, and a header of 50 million '[' would otherwise
// overflow the stack the first time an error message printed part of it.
inline constexpr int kMaxJsonNestingDepth = 64;
absl::StatusOr<nlohmann::json> ParseJsonRejectingDuplicateKeys(absl::string_view text);

// `value` as JSON for an error message, cut to about 80 characters: untrusted values can be
// megabytes long.
std::string JsonForMessage(const nlohmann::json& value);

}  // namespace metaload

#endif  // METALOAD_UTIL_JSON_STRICT_JSON_H_
