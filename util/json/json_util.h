// Strict JSON reading and stable JSON writing shared by the planner's file formats
// (skeleton, plan). Internal to planner/: nlohmann-json is a private dependency.
//
// Reading: every error is InvalidArgument and starts with `where` ("model.json: tensors[3]"),
// so a user sees which file and which field is wrong. Unknown and duplicate keys are errors:
// a typo in a hand-written file must not be silently ignored.
//
// Writing: OneLineJson prints an object or array on one line with ", " and ": " separators,
// so large lists (thousands of tensors) stay one entry per line and diff well.
#ifndef METALOAD_UTIL_JSON_JSON_UTIL_H_
#define METALOAD_UTIL_JSON_JSON_UTIL_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace metaload::json_util {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// ParseJsonRejectingDuplicateKeys, with errors prefixed by `where`.
absl::StatusOr<Json> Parse(absl::string_view text, absl::string_view where);

// `value` must be an object with every `required` key and no key outside
// `required` + `optional`.
absl::Status CheckObject(const Json& value, absl::string_view where,
                         std::initializer_list<absl::string_view> required,
                         std::initializer_list<absl::string_view> optional);

// Typed fields. REQUIRES: `object` is an object (CheckObject first). The Optional*
// variants leave `*out` unchanged when the key is absent.
absl::StatusOr<std::string> GetString(const Json& object, absl::string_view key, absl::string_view where);
absl::StatusOr<int64_t> GetInt64(const Json& object, absl::string_view key, absl::string_view where);
absl::StatusOr<uint64_t> GetUint64(const Json& object, absl::string_view key, absl::string_view where);
absl::Status OptionalString(const Json& object, absl::string_view key, absl::string_view where,
                            std::string* out);
absl::Status OptionalBool(const Json& object, absl::string_view key, absl::string_view where, bool* out);
// The array at `key` (an error when it is not an array).
absl::StatusOr<const Json*> GetArray(const Json& object, absl::string_view key, absl::string_view where);

// A shape: an array of integers in [0, 2^63).
absl::StatusOr<std::vector<int64_t>> ToShape(const Json& value, absl::string_view where);
absl::StatusOr<std::string> ToString(const Json& value, absl::string_view where);
// An integer in [0, 2^64).
absl::StatusOr<uint64_t> ToUint64(const Json& value, absl::string_view where);

// `"text"` with JSON escaping; invalid UTF-8 is replaced rather than thrown on.
std::string Quote(absl::string_view text);
std::string OneLineJson(const OrderedJson& value);

}  // namespace metaload::json_util

#endif  // METALOAD_UTIL_JSON_JSON_UTIL_H_
