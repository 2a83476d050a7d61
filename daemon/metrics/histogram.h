// A Prometheus histogram of fixed buckets, updated with atomics only (no lock on the calls it
// measures): cumulative `_bucket{le=...}` lines, `_sum` and `_count` when written.
//
//   Histogram latency({0.001, 0.01, 0.1, 1});
//   latency.Observe(0.004);
//   latency.Write("metaload_rpc_duration_seconds", {{"method", "GetPlan"}}, text);
//
// Thread-safety: Observe and Write from any thread. A Write concurrent with Observes sees each
// bucket at some moment; `_count` is the sum of what it read, so it always equals the +Inf bucket.
#ifndef METALOAD_DAEMON_METRICS_HISTOGRAM_H_
#define METALOAD_DAEMON_METRICS_HISTOGRAM_H_

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "absl/strings/string_view.h"
#include "daemon/metrics/metrics_text.h"

namespace metaload {

class Histogram {
 public:
  // REQUIRES: `upper_bounds` finite and ascending.
  explicit Histogram(std::vector<double> upper_bounds);

  void Observe(double value);
  // Its lines, with `labels` and `le`. The family (metrics_text.h) is the caller's.
  // REQUIRES: at most 3 labels.
  void Write(absl::string_view name, std::initializer_list<MetricLabel> labels, MetricsText& text) const;
  uint64_t count() const;

 private:
  const std::vector<double> upper_bounds_;
  // One per bound, and the last for what is above them all: not cumulative here.
  const std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<double> sum_{0};
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_METRICS_HISTOGRAM_H_
