#include "util/json/strict_json.h"

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace metaload {

absl::StatusOr<nlohmann::json> ParseJsonRejectingDuplicateKeys(absl::string_view text) {
  using Json = nlohmann::json;
  std::vector<std::set<std::string>> keys_per_open_object;
  // last_key_at_depth[d] is the key most recently read at depth d: the name of the value
  // that an object opened at depth d + 1 belongs to, used only to say where a duplicate is.
  std::vector<std::string> last_key_at_depth;
  std::string duplicate_message;
  // Thrown from the callback: the only way to stop nlohmann's parser early.
  struct TooDeep {};
  auto on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::array_start:
        if (depth >= kMaxJsonNestingDepth) throw TooDeep();
        break;
      case Json::parse_event_t::object_start:
        if (depth >= kMaxJsonNestingDepth) throw TooDeep();
        keys_per_open_object.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        keys_per_open_object.pop_back();
        break;
      case Json::parse_event_t::key: {
        std::string key = parsed.get<std::string>();
        // Keys read deeper belong to values already closed; forget them.
        last_key_at_depth.resize(depth + 1);
        last_key_at_depth[depth] = key;
        if (duplicate_message.empty() && !keys_per_open_object.empty() &&
            !keys_per_open_object.back().insert(key).second) {
          const std::string& owner = depth >= 2 ? last_key_at_depth[depth - 1] : std::string();
          duplicate_message = absl::StrCat(
              "duplicate key \"", key, "\" in ",
              depth <= 1
                  ? "the top-level object"
                  : (owner.empty() ? "a nested object" : absl::StrCat("the object under \"", owner, "\"")));
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  Json value;
  try {
    value = Json::parse(text.begin(), text.end(), on_event);
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for "1e400"
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON: ", e.what()));
  } catch (const TooDeep&) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON: nested deeper than ", kMaxJsonNestingDepth, " levels"));
  }
  if (!duplicate_message.empty()) return absl::InvalidArgumentError(duplicate_message);
  return value;
}

std::string JsonForMessage(const nlohmann::json& value) {
  constexpr size_t kMaxChars = 80;
  if (value.is_structured() && value.size() > kMaxChars) {
    return absl::StrCat(value.type_name(), " of ", value.size(), " elements");
  }
  // Valid UTF-8 is guaranteed only for parsed text; replace rather than throw on the rest.
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kMaxChars) text = absl::StrCat(text.substr(0, kMaxChars), "...");
  return text;
}

}  // namespace metaload
