// The Prometheus text exposition format, version 0.0.4 (what every Prometheus, the Grafana
// agent and the OpenTelemetry collector scrape): `# HELP` and `# TYPE` lines per family, then a
// line per sample, `name{label="value",...} value`. A writer of our own rather than
// prometheus-cpp (docs/operations.md, "Why a writer of our own"): metad needs its own listener
// anyway (scrape_server.h: caps, timeouts, the token), so the library would bring only this
// formatting, and one more shared library for the wheel and the image to carry.
//
// What the format's readers refuse, this never writes: a name outside [a-zA-Z_:][a-zA-Z0-9_:]*
// or a label name outside [a-zA-Z_][a-zA-Z0-9_]* (or starting "__", reserved) drops the sample
// (counted in dropped()); label values are escaped (backslash, double quote, line feed) and
// help texts too (backslash, line feed); bytes that are not UTF-8 become U+FFFD. Fuzzed by
// fuzz/metrics_text_fuzz.cc.
//
//   MetricsText text;
//   text.Family("metaload_streams_in_flight", MetricType::kGauge, "ReadRange streams being served");
//   text.Sample("metaload_streams_in_flight", {}, 3);
//   text.Sample("metaload_refused_total", {{"reason", "max_streams"}}, 7);
//   std::string body = text.Take();
//
// Thread-safety: one writer per thread.
#ifndef METALOAD_DAEMON_METRICS_METRICS_TEXT_H_
#define METALOAD_DAEMON_METRICS_METRICS_TEXT_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace metaload {

enum class MetricType { kCounter, kGauge, kHistogram };

struct MetricLabel {
  absl::string_view name;
  absl::string_view value;
};

// The Content-Type of what MetricsText writes.
inline constexpr absl::string_view kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

bool IsValidMetricName(absl::string_view name);
bool IsValidLabelName(absl::string_view name);
// `value` as it goes between the quotes of a label: \ as \\, " as \", line feed as \n, and
// what is not UTF-8 as U+FFFD.
void AppendEscapedLabelValue(absl::string_view value, std::string* out);

class MetricsText {
 public:
  // `# HELP name help` and `# TYPE name type`. Once per family, before its samples.
  void Family(absl::string_view name, MetricType type, absl::string_view help);
  // One sample line. A histogram's samples are its `_bucket` (with an `le` label), `_sum` and
  // `_count` lines (histogram.h writes them).
  void Sample(absl::string_view name, std::initializer_list<MetricLabel> labels, uint64_t value);
  void Sample(absl::string_view name, std::initializer_list<MetricLabel> labels, double value);
  // A counter family of one label: its # lines, then a sample per (label value, count).
  void CounterByLabel(absl::string_view name, absl::string_view help, absl::string_view label,
                      std::initializer_list<std::pair<absl::string_view, uint64_t>> counts);
  // Samples or families not written for a bad name (a bug of the caller's, not an input's).
  uint64_t dropped() const { return dropped_; }
  std::string Take() { return std::move(text_); }

 private:
  bool StartSample(absl::string_view name, std::initializer_list<MetricLabel> labels);

  std::string text_;
  uint64_t dropped_ = 0;
};

// `value` as the format writes a float: shortest exact decimal for integers, 15 significant
// digits otherwise, and +Inf, -Inf, NaN.
std::string FormatMetricValue(double value);

}  // namespace metaload

#endif  // METALOAD_DAEMON_METRICS_METRICS_TEXT_H_
