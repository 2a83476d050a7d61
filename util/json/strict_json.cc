#include "util/json/strict_json.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace metaload {
namespace {

using Json = nlohmann::json;

// "syntax error while parsing object - unexpected end of input" out of nlohmann's message: up to
// the first ';' or ':' after " - ", where the token read, or a character of it, would follow.
// Numbers too large for a double are out_of_range (406).
std::string SyntaxErrorKind(const Json::exception& error) {
  if (error.id == 406) return "a number is out of range";
  std::string message = error.what();
  const size_t start = message.find("syntax error");
  if (start == std::string::npos) return "syntax error";
  message = message.substr(start);
  const size_t dash = message.find(" - ");
  if (dash == std::string::npos) return "syntax error";
  message.resize(std::min(message.size(), message.find_first_of(";:", dash)));
  return message;
}

// Builds the document from nlohmann's SAX events, as its own DOM parser does, and finds a
// repeated key by the insertion into the object itself: each member costs one insertion into
// its object's std::map, so n members cost O(n log n). nlohmann's callback parser, which this replaced, scans
// the parent object's members for a discarded one after every nested object closes: quadratic, 41 s for a
// header of 25,000 tensors.
class StrictDomBuilder : public nlohmann::json_sax<Json> {
 public:
  explicit StrictDomBuilder(Json& root) : root_(root) {}

  bool null() override { return Add(Json(nullptr)); }
  bool boolean(bool value) override { return Add(Json(value)); }
  bool number_integer(number_integer_t value) override { return Add(Json(value)); }
  bool number_unsigned(number_unsigned_t value) override { return Add(Json(value)); }
  bool number_float(number_float_t value, const string_t& /*text*/) override { return Add(Json(value)); }
  bool string(string_t& value) override { return Add(Json(std::move(value))); }
  bool binary(binary_t& value) override { return Add(Json::binary(std::move(value))); }

  bool start_object(std::size_t /*elements*/) override { return Open(Json::object()); }
  bool start_array(std::size_t /*elements*/) override { return Open(Json::array()); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }

  bool key(string_t& key) override {
    // Keys read deeper belong to values already closed; forget them.
    const size_t depth = open_.size();
    last_key_at_depth_.resize(depth + 1);
    last_key_at_depth_[depth] = key;
    auto [it, inserted] = open_.back()->get_ref<Json::object_t&>().emplace(key, nullptr);
    if (!inserted && duplicate_message_.empty()) {
      const std::string& owner = depth >= 2 ? last_key_at_depth_[depth - 1] : std::string();
      duplicate_message_ = absl::StrCat(
          "duplicate key \"", key, "\" in ",
          depth <= 1
              ? "the top-level object"
              : (owner.empty() ? "a nested object" : absl::StrCat("the object under \"", owner, "\"")));
    }
    member_ = &it->second;  // a repeated key's later value overwrites: the document is refused anyway
    return true;
  }

  // Says where and what kind of error, never the text read: nlohmann's message ends with the
  // token it last read ("last read: 'AWS_SECRET...'"), and the file may be a secret put where a
  // checkpoint was expected (issue 23).
  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const Json::exception& error) override {
    syntax_message_ = absl::StrCat("at byte ", position, ": ", SyntaxErrorKind(error));
    return false;
  }

  // The first problem, in the order the callback parser reported them: a syntax error, then
  // nesting too deep, then a repeated key.
  absl::Status status() const {
    if (!syntax_message_.empty())
      return absl::InvalidArgumentError(absl::StrCat("invalid JSON ", syntax_message_));
    if (too_deep_) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid JSON: nested deeper than ", kMaxJsonNestingDepth, " levels"));
    }
    if (!duplicate_message_.empty()) return absl::InvalidArgumentError(duplicate_message_);
    return absl::OkStatus();
  }

 private:
  // Where the next value goes. A pointer into an open array or object stays valid: nothing
  // is added to a container while a value inside it is still open.
  Json* Place(Json value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    *member_ = std::move(value);
    return member_;
  }
  bool Add(Json value) {
    Place(std::move(value));
    return true;
  }
  bool Open(Json container) {
    if (open_.size() >= static_cast<size_t>(kMaxJsonNestingDepth)) {
      too_deep_ = true;
      return false;
    }
    open_.push_back(Place(std::move(container)));
    return true;
  }
  bool Close() {
    open_.pop_back();
    return true;
  }

  Json& root_;
  std::vector<Json*> open_;  // the arrays and objects not closed yet, outermost first
  Json* member_ = nullptr;   // the member of open_.back() the last key made
  // last_key_at_depth_[d] is the key most recently read at depth d: the name of the value
  // that an object opened at depth d + 1 belongs to, used only to say where a duplicate is.
  std::vector<std::string> last_key_at_depth_;
  std::string duplicate_message_;
  std::string syntax_message_;
  bool too_deep_ = false;
};

}  // namespace

absl::StatusOr<nlohmann::json> ParseJsonRejectingDuplicateKeys(absl::string_view text) {
  Json value;
  StrictDomBuilder builder(value);
  Json::sax_parse(text.begin(), text.end(), &builder);
  if (absl::Status status = builder.status(); !status.ok()) return status;
  return value;
}

std::string JsonForMessage(const nlohmann::json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
      return value.get<int64_t>() < 0 ? "a negative integer" : "an integer";
    case Json::value_t::number_unsigned:
      return value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                 ? "an integer of 2^63 or more"
                 : "an integer";
    case Json::value_t::number_float:
      return "a floating-point number";
    case Json::value_t::string:
      return absl::StrCat("a string of ", value.get_ref<const std::string&>().size(), " bytes");
    case Json::value_t::array:
      return absl::StrCat("an array of ", value.size(), " elements");
    case Json::value_t::object:
      return absl::StrCat("an object of ", value.size(), " members");
    default:
      return value.type_name();
  }
}

}  // namespace metaload
