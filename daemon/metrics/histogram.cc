#include "daemon/metrics/histogram.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace metaload {

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(new std::atomic<uint64_t>[upper_bounds_.size() + 1]) {
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  // The first bound at or above `value` (buckets are `le`, less or equal).
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

uint64_t Histogram::count() const {
  uint64_t total = 0;
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) total += counts_[i].load(std::memory_order_relaxed);
  return total;
}

void Histogram::Write(absl::string_view name, std::initializer_list<MetricLabel> labels,
                      MetricsText& text) const {
  const std::string bucket_name = absl::StrCat(name, "_bucket");
  // The caller's labels and `le`, as one list (initializer lists cannot be appended to).
  MetricLabel all[4];
  const size_t n = std::min<size_t>(labels.size(), 3);
  std::copy_n(labels.begin(), n, all);
  const auto write_bucket = [&](absl::string_view le, uint64_t cumulative) {
    all[n] = MetricLabel{"le", le};
    switch (n) {
      case 0:
        text.Sample(bucket_name, {all[0]}, cumulative);
        break;
      case 1:
        text.Sample(bucket_name, {all[0], all[1]}, cumulative);
        break;
      case 2:
        text.Sample(bucket_name, {all[0], all[1], all[2]}, cumulative);
        break;
      default:
        text.Sample(bucket_name, {all[0], all[1], all[2], all[3]}, cumulative);
        break;
    }
  };
  uint64_t cumulative = 0;
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    write_bucket(FormatMetricValue(upper_bounds_[i]), cumulative);
  }
  cumulative += counts_[upper_bounds_.size()].load(std::memory_order_relaxed);
  write_bucket("+Inf", cumulative);
  text.Sample(absl::StrCat(name, "_sum"), labels, sum_.load(std::memory_order_relaxed));
  text.Sample(absl::StrCat(name, "_count"), labels, cumulative);
}

}  // namespace metaload
