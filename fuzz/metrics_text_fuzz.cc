// MetricsText (daemon/metrics/metrics_text.h), the writer of metad's /metrics: the input is cut at
// its zero bytes into a metric name, a label name, a label value and a help text, written as a
// family and two samples. Besides crashes and UB it aborts when the text is not what a
// Prometheus parser reads back: a line that is not `# HELP`, `# TYPE` or `name{labels} value`, a
// name or label name outside the format's grammar, output that is not UTF-8 (util/utf8.h, itself fuzzed
// through safetensors_header), or a label value that does not unescape to the input's value (its bytes that
// are not UTF-8 as U+FFFD).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "daemon/metrics/metrics_text.h"
#include "util/utf8.h"

namespace {

void Require(bool condition) {
  if (!condition) std::abort();
}

// A sample line's label value from `at` (just past its opening quote), unescaped; `at` ends
// past the closing quote.
std::string Unescape(absl::string_view line, size_t& at) {
  std::string value;
  while (true) {
    Require(at < line.size());
    const char c = line[at++];
    if (c == '"') return value;
    if (c != '\\') {
      value.push_back(c);
      continue;
    }
    Require(at < line.size());
    const char e = line[at++];
    Require(e == '\\' || e == '"' || e == 'n');
    value.push_back(e == 'n' ? '\n' : e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<absl::string_view> parts = absl::StrSplit(input, absl::MaxSplits('\0', 3));
  parts.resize(4);
  const absl::string_view name = parts[0], label = parts[1], value = parts[2], help = parts[3];
  metaload::MetricsText text;
  text.Family(name, metaload::MetricType::kCounter, help);
  text.Sample(name, {{label, value}}, uint64_t{7});
  text.Sample(name, {}, 0.5);
  const bool valid = metaload::IsValidMetricName(name) && metaload::IsValidLabelName(label);
  const uint64_t dropped = text.dropped();
  const std::string out = text.Take();
  Require(metaload::IsValidUtf8(out));
  std::string expected_value;
  metaload::AppendEscapedLabelValue(value, &expected_value);
  size_t samples = 0;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (line.empty()) continue;
    if (line.substr(0, 2) == "# ") {
      Require(line.substr(0, 7) == "# HELP " || line.substr(0, 7) == "# TYPE ");
      continue;
    }
    ++samples;
    size_t at = line.find_first_of("{ ");
    Require(at != absl::string_view::npos);
    Require(metaload::IsValidMetricName(line.substr(0, at)) && line.substr(0, at) == name);
    if (line[at] == '{') {
      ++at;
      const size_t equals = line.find('=', at);
      Require(equals != absl::string_view::npos && line.substr(at, equals - at) == label);
      Require(equals + 1 < line.size() && line[equals + 1] == '"');
      at = equals + 2;
      const std::string unescaped = Unescape(line, at);
      // What went in, its bytes that are not UTF-8 as U+FFFD: escaping it again gives the writer's text.
      std::string again;
      metaload::AppendEscapedLabelValue(unescaped, &again);
      Require(again == expected_value);
      if (metaload::IsValidUtf8(value)) Require(unescaped == value);
      Require(at < line.size() && line[at] == '}');
      ++at;
    }
    Require(line.substr(at) == " 7" || line.substr(at) == " 0.5");
  }
  Require(valid ? samples == 2 && dropped == 0 : samples <= 1 && dropped >= 1);
  return 0;
}
