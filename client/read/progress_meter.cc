#include "client/read/progress_meter.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "util/log.h"

namespace metaload {

std::unique_ptr<ProgressMeter> ProgressMeter::Start(const ProgressCallback& callback, absl::Duration interval,
                                                    ProgressTotals totals) {
  if (!callback) return nullptr;
  return std::unique_ptr<ProgressMeter>(new ProgressMeter(callback, interval, totals));
}

ProgressMeter::ProgressMeter(ProgressCallback callback, absl::Duration interval, ProgressTotals totals)
    : callback_(std::move(callback)),
      interval_(interval),
      started_(absl::Now()),
      total_bytes_(static_cast<int64_t>(totals.bytes)),
      total_tensors_(totals.tensors) {
  reporter_ = std::thread([this] { ReportEvery(); });
}

ProgressMeter::~ProgressMeter() { Finish(); }

void ProgressMeter::AdjustTotalBytes(int64_t delta) {
  total_bytes_.fetch_add(delta, std::memory_order_relaxed);
}

LoadProgress ProgressMeter::Snapshot() const {
  LoadProgress p;
  p.direct_bytes = direct_.load(std::memory_order_relaxed);
  p.streamed_bytes = streamed_.load(std::memory_order_relaxed);
  p.received_bytes = received_.load(std::memory_order_relaxed);
  p.total_bytes = static_cast<uint64_t>(std::max<int64_t>(0, total_bytes_.load(std::memory_order_relaxed)));
  p.tensors_done = tensors_done_.load(std::memory_order_relaxed);
  p.tensors_total = total_tensors_;
  p.seconds = absl::ToDoubleSeconds(absl::Now() - started_);
  return p;
}

void ProgressMeter::ReportEvery() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval_)) return;
    }
    Report(Snapshot());
  }
}

void ProgressMeter::Report(const LoadProgress& progress) {
  if (broken_) return;
  // Nothing may escape into the load's threads: a callback that throws is dropped, the load
  // goes on.
  try {
    callback_(progress);
  } catch (const std::exception& e) {
    broken_ = true;
    LogWarning(absl::StrCat("the progress callback failed (", e.what(), "); no more progress is reported"));
  } catch (...) {
    broken_ = true;
    LogWarning("the progress callback threw; no more progress is reported");
  }
}

void ProgressMeter::Finish() {
  if (finished_) return;
  finished_ = true;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  reporter_.join();  // after it, `broken_` is this thread's
  LoadProgress last = Snapshot();
  last.finished = true;
  Report(last);
}

}  // namespace metaload
