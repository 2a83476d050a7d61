// FormatLogLine (util/log.h): a message and a field from outside (a hostile model or node name, a
// path, an error naming either) in both formats. The first byte picks the level and where the
// rest is cut into message and field. Besides crashes and UB it aborts when a line is not exactly
// one line, when a text line keeps a control byte, or when a JSON line does not parse back to
// an object whose msg is the message (exactly, when the message is ASCII).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "nlohmann/json.hpp"
#include "util/log.h"

namespace {

void CheckOneLine(const std::string& line) {
  if (line.empty() || line.back() != '\n' || line.find('\n') != line.size() - 1) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t cut = rest.empty() ? 0 : (pick >> 2) % (rest.size() + 1);
  const std::string message = rest.substr(0, cut);
  const std::string field = rest.substr(cut);
  const auto level = static_cast<metaload::LogLevel>(pick % 3);
  const absl::Time when = absl::FromUnixMillis(1'796'557'678'890);
  const metaload::LogField fields[] = {{"event", "fuzz"}, {"name", field}, {"bytes", uint64_t{size}}};

  const std::string text =
      metaload::FormatLogLine(metaload::LogFormat::kText, "metad", level, when, message, fields);
  CheckOneLine(text);
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) std::abort();
  }

  const std::string json =
      metaload::FormatLogLine(metaload::LogFormat::kJson, "metad", level, when, message, fields);
  CheckOneLine(json);
  const nlohmann::json parsed = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object() || !parsed["msg"].is_string() || !parsed["name"].is_string()) std::abort();
  bool ascii = true;
  for (const char c : message) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii && parsed["msg"].get<std::string>() != message) std::abort();
  return 0;
}
