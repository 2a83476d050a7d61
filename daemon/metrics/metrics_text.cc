#include "daemon/metrics/metrics_text.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/utf8.h"

namespace metaload {
namespace {

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }

// Escapes \ and line feed, and `"` when `quote`; replaces what is not UTF-8 by U+FFFD.
void AppendEscaped(absl::string_view text, bool quote, std::string* out) {
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '"' && quote) {
      out->append("\\\"");
    } else if (const size_t length = Utf8SequenceLength(text, i); length != 0) {
      out->append(text.data() + i, length);
      i += length;
      continue;
    } else {
      out->append("\xEF\xBF\xBD");  // U+FFFD
    }
    ++i;
  }
}

}  // namespace

bool IsValidMetricName(absl::string_view name) {
  if (name.empty() || !(IsNameStart(name[0]) || name[0] == ':')) return false;
  for (char c : name) {
    if (!IsNameChar(c) && c != ':') return false;
  }
  return true;
}

bool IsValidLabelName(absl::string_view name) {
  if (name.empty() || !IsNameStart(name[0]) || name.substr(0, 2) == "__") return false;
  for (char c : name) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

void AppendEscapedLabelValue(absl::string_view value, std::string* out) { AppendEscaped(value, true, out); }

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Integers below 2^53 exactly, without an exponent.
  if (value == std::floor(value) && std::fabs(value) < 9007199254740992.0) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  return absl::StrFormat("%.15g", value);
}

void MetricsText::Family(absl::string_view name, MetricType type, absl::string_view help) {
  if (!IsValidMetricName(name)) {
    ++dropped_;
    return;
  }
  absl::StrAppend(&text_, "# HELP ", name, " ");
  AppendEscaped(help, /*quote=*/false, &text_);
  absl::StrAppend(&text_, "\n# TYPE ", name, " ",
                  type == MetricType::kCounter ? "counter"
                  : type == MetricType::kGauge ? "gauge"
                                               : "histogram",
                  "\n");
}

bool MetricsText::StartSample(absl::string_view name, std::initializer_list<MetricLabel> labels) {
  bool valid = IsValidMetricName(name);
  for (const MetricLabel& label : labels) valid = valid && IsValidLabelName(label.name);
  if (!valid) {
    ++dropped_;
    return false;
  }
  text_.append(name.data(), name.size());
  if (labels.size() != 0) {
    text_.push_back('{');
    bool first = true;
    for (const MetricLabel& label : labels) {
      if (!first) text_.push_back(',');
      first = false;
      absl::StrAppend(&text_, label.name, "=\"");
      AppendEscapedLabelValue(label.value, &text_);
      text_.push_back('"');
    }
    text_.push_back('}');
  }
  text_.push_back(' ');
  return true;
}

void MetricsText::CounterByLabel(absl::string_view name, absl::string_view help, absl::string_view label,
                                 std::initializer_list<std::pair<absl::string_view, uint64_t>> counts) {
  Family(name, MetricType::kCounter, help);
  for (const auto& [label_value, count] : counts) Sample(name, {{label, label_value}}, count);
}

void MetricsText::Sample(absl::string_view name, std::initializer_list<MetricLabel> labels, uint64_t value) {
  if (StartSample(name, labels)) absl::StrAppend(&text_, value, "\n");
}

void MetricsText::Sample(absl::string_view name, std::initializer_list<MetricLabel> labels, double value) {
  if (StartSample(name, labels)) absl::StrAppend(&text_, FormatMetricValue(value), "\n");
}

}  // namespace metaload
