// Counting one rank's load as its bytes arrive, for the progress callback
// (include/metaload/progress.h): the reads (fill.h), the fan-out's receives
// (client/load/fanout.h) and dequantization add to it; a thread of its own hands a snapshot to
// the callback every interval, so that no reading thread ever waits on the callback.
//
//   std::unique_ptr<ProgressMeter> meter = ProgressMeter::Start(read, {.bytes = b, .tensors = n});
//   read.meter = meter.get();     // null without a callback: nothing is counted
//   ... FillResolved(..., read) ...
//   meter.reset();                // the last record, `finished`, on this thread
//
// Thread-safety: the Add* calls are atomic adds, from any thread; Finish (and the destructor)
// from the thread that started it.
#ifndef METALOAD_CLIENT_READ_PROGRESS_METER_H_
#define METALOAD_CLIENT_READ_PROGRESS_METER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "metaload/progress.h"

namespace metaload {

// What a load is to read or receive, known once its requests are resolved.
struct ProgressTotals {
  uint64_t bytes = 0;
  uint64_t tensors = 0;
};

class ProgressMeter {
 public:
  // Calls `callback` every `interval` from a thread of its own until Finish. Null when
  // `callback` is empty: a load without one counts nothing.
  static std::unique_ptr<ProgressMeter> Start(const ProgressCallback& callback, absl::Duration interval,
                                              ProgressTotals totals);
  ~ProgressMeter();  // Finish()
  ProgressMeter(const ProgressMeter&) = delete;
  ProgressMeter& operator=(const ProgressMeter&) = delete;

  void AddDirect(uint64_t bytes) { direct_.fetch_add(bytes, std::memory_order_relaxed); }
  void AddStreamed(uint64_t bytes) { streamed_.fetch_add(bytes, std::memory_order_relaxed); }
  void AddReceived(uint64_t bytes) { received_.fetch_add(bytes, std::memory_order_relaxed); }
  void TensorDone() { tensors_done_.fetch_add(1, std::memory_order_relaxed); }
  // A correction of the planned bytes (a tensor that arrives by fan-out in its held dtype).
  void AdjustTotalBytes(int64_t delta);

  LoadProgress Snapshot() const;

  // Stops the reporting thread, then calls the callback once more with `finished` set, here.
  // Later calls do nothing.
  void Finish();

 private:
  ProgressMeter(ProgressCallback callback, absl::Duration interval, ProgressTotals totals);
  void ReportEvery();
  void Report(const LoadProgress& progress);  // unless the callback threw before

  const ProgressCallback callback_;
  const absl::Duration interval_;
  const absl::Time started_;
  std::atomic<uint64_t> direct_{0}, streamed_{0}, received_{0}, tensors_done_{0};
  std::atomic<int64_t> total_bytes_;
  const uint64_t total_tensors_;
  bool broken_ = false;  // the callback threw: only the thread that calls it reads or writes this
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reporter_;
  bool finished_ = false;  // Finish's thread only
};

}  // namespace metaload

#endif  // METALOAD_CLIENT_READ_PROGRESS_METER_H_
