#include "util/json/json_util.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/json/strict_json.h"
#include "util/status_macros.h"

namespace metaload::json_util {
namespace {

absl::Status Error(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

std::string FieldWhere(absl::string_view where, absl::string_view key) {
  return absl::StrCat(where, ": field \"", key, "\"");
}

const char* TypeName(const Json& value) { return value.type_name(); }

void AppendOneLine(const OrderedJson& value, std::string* out) {
  if (value.is_object()) {
    out->push_back('{');
    bool first = true;
    for (const auto& [key, member] : value.items()) {
      if (!first) out->append(", ");
      first = false;
      absl::StrAppend(out, Quote(key), ": ");
      AppendOneLine(member, out);
    }
    out->push_back('}');
  } else if (value.is_array()) {
    out->push_back('[');
    for (size_t i = 0; i < value.size(); ++i) {
      if (i > 0) out->append(", ");
      AppendOneLine(value[i], out);
    }
    out->push_back(']');
  } else {
    out->append(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
}

}  // namespace

absl::StatusOr<Json> Parse(absl::string_view text, absl::string_view where) {
  absl::StatusOr<Json> parsed = ParseJsonRejectingDuplicateKeys(text);
  if (!parsed.ok()) return Annotate(parsed.status(), where);
  return parsed;
}

absl::Status CheckObject(const Json& value, absl::string_view where,
                         std::initializer_list<absl::string_view> required,
                         std::initializer_list<absl::string_view> optional) {
  if (!value.is_object()) return Error(where, absl::StrCat("expected an object, found ", TypeName(value)));
  for (absl::string_view key : required) {
    if (!value.contains(std::string(key))) return Error(where, absl::StrCat("missing field \"", key, "\""));
  }
  for (const auto& [key, member] : value.items()) {
    bool known = false;
    for (absl::string_view k : required) known = known || k == key;
    for (absl::string_view k : optional) known = known || k == key;
    if (!known) {
      std::vector<absl::string_view> all(required);
      all.insert(all.end(), optional.begin(), optional.end());
      return Error(where,
                   absl::StrCat("unknown field \"", key, "\" (known: ", absl::StrJoin(all, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ToString(const Json& value, absl::string_view where) {
  if (!value.is_string()) return Error(where, absl::StrCat("expected a string, found ", TypeName(value)));
  return value.get<std::string>();
}

absl::StatusOr<uint64_t> ToUint64(const Json& value, absl::string_view where) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer()) return Error(where, absl::StrCat(value.get<int64_t>(), " is negative"));
  return Error(where, absl::StrCat("expected a non-negative integer, found ", TypeName(value)));
}

absl::StatusOr<std::vector<int64_t>> ToShape(const Json& value, absl::string_view where) {
  if (!value.is_array())
    return Error(where, absl::StrCat("expected an array of dimensions, found ", TypeName(value)));
  std::vector<int64_t> shape;
  shape.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    const Json& dim = value[i];
    std::string dim_where = absl::StrCat(where, "[", i, "]");
    if (dim.is_number_integer() && !dim.is_number_unsigned()) {
      return Error(dim_where, absl::StrCat("dimension ", dim.get<int64_t>(), " is negative"));
    }
    if (!dim.is_number_unsigned()) {
      return Error(dim_where, absl::StrCat("dimension must be a non-negative integer, found ", dim.dump()));
    }
    uint64_t d = dim.get<uint64_t>();
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Error(dim_where, absl::StrCat("dimension ", d, " does not fit in 63 bits"));
    }
    shape.push_back(static_cast<int64_t>(d));
  }
  return shape;
}

absl::StatusOr<std::string> GetString(const Json& object, absl::string_view key, absl::string_view where) {
  auto it = object.find(std::string(key));
  if (it == object.end()) return Error(where, absl::StrCat("missing field \"", key, "\""));
  return ToString(*it, FieldWhere(where, key));
}

absl::StatusOr<uint64_t> GetUint64(const Json& object, absl::string_view key, absl::string_view where) {
  auto it = object.find(std::string(key));
  if (it == object.end()) return Error(where, absl::StrCat("missing field \"", key, "\""));
  return ToUint64(*it, FieldWhere(where, key));
}

absl::StatusOr<int64_t> GetInt64(const Json& object, absl::string_view key, absl::string_view where) {
  auto it = object.find(std::string(key));
  if (it == object.end()) return Error(where, absl::StrCat("missing field \"", key, "\""));
  if (it->is_number_unsigned()) {
    uint64_t v = it->get<uint64_t>();
    if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return static_cast<int64_t>(v);
    return Error(FieldWhere(where, key), absl::StrCat(v, " does not fit in 63 bits"));
  }
  if (it->is_number_integer()) return it->get<int64_t>();
  return Error(FieldWhere(where, key), absl::StrCat("expected an integer, found ", TypeName(*it)));
}

absl::Status OptionalString(const Json& object, absl::string_view key, absl::string_view where,
                            std::string* out) {
  auto it = object.find(std::string(key));
  if (it == object.end()) return absl::OkStatus();
  absl::StatusOr<std::string> value = ToString(*it, FieldWhere(where, key));
  if (!value.ok()) return value.status();
  *out = *std::move(value);
  return absl::OkStatus();
}

absl::Status OptionalBool(const Json& object, absl::string_view key, absl::string_view where, bool* out) {
  auto it = object.find(std::string(key));
  if (it == object.end()) return absl::OkStatus();
  if (!it->is_boolean()) {
    return Error(FieldWhere(where, key), absl::StrCat("expected true or false, found ", TypeName(*it)));
  }
  *out = it->get<bool>();
  return absl::OkStatus();
}

absl::StatusOr<const Json*> GetArray(const Json& object, absl::string_view key, absl::string_view where) {
  auto it = object.find(std::string(key));
  if (it == object.end()) return Error(where, absl::StrCat("missing field \"", key, "\""));
  if (!it->is_array()) {
    return Error(FieldWhere(where, key), absl::StrCat("expected an array, found ", TypeName(*it)));
  }
  return &*it;
}

std::string Quote(absl::string_view text) {
  return Json(std::string(text)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string OneLineJson(const OrderedJson& value) {
  std::string out;
  AppendOneLine(value, &out);
  return out;
}

}  // namespace metaload::json_util
