// ProgressMeter: records every interval from a thread of its own while the counts only grow,
// the last one (finished) on the thread that finishes it, a callback that throws dropped, and
// a slow one never holding up the counting.
#include "client/read/progress_meter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace metaload {
namespace {

struct Records {
  std::mutex mu;
  std::vector<LoadProgress> seen;
  std::vector<std::thread::id> threads;
  ProgressCallback Callback() {
    return [this](const LoadProgress& p) {
      std::lock_guard<std::mutex> lock(mu);
      seen.push_back(p);
      threads.push_back(std::this_thread::get_id());
    };
  }
};

TEST(ProgressMeter, WithoutACallbackNothingIsCounted) {
  EXPECT_EQ(ProgressMeter::Start(ProgressCallback(), absl::Milliseconds(10), {}), nullptr);
}

TEST(ProgressMeter, ReportsEveryIntervalFromItsThreadThenOnceFinishedHere) {
  Records records;
  std::unique_ptr<ProgressMeter> meter =
      ProgressMeter::Start(records.Callback(), absl::Milliseconds(10), {.bytes = 700, .tensors = 3});
  ASSERT_NE(meter, nullptr);
  meter->AddDirect(100);
  absl::SleepFor(absl::Milliseconds(50));
  meter->AddStreamed(200);
  meter->TensorDone();
  meter->AddReceived(400);
  meter->TensorDone();
  meter->AdjustTotalBytes(-100);  // a fan-out's tensor in a narrower dtype than stored
  absl::SleepFor(absl::Milliseconds(50));
  meter->Finish();
  meter->Finish();  // once
  meter.reset();

  ASSERT_GE(records.seen.size(), 3u);
  for (size_t i = 0; i + 1 < records.seen.size(); ++i) {
    EXPECT_FALSE(records.seen[i].finished);
    EXPECT_NE(records.threads[i], std::this_thread::get_id());
    EXPECT_LE(records.seen[i].done_bytes(), records.seen[i + 1].done_bytes());
    EXPECT_LE(records.seen[i].seconds, records.seen[i + 1].seconds);
  }
  EXPECT_EQ(records.seen.front().direct_bytes, 100u);
  EXPECT_EQ(records.seen.front().total_bytes, 700u);
  const LoadProgress& last = records.seen.back();
  EXPECT_TRUE(last.finished);
  EXPECT_EQ(records.threads.back(), std::this_thread::get_id());
  EXPECT_EQ(last.direct_bytes, 100u);
  EXPECT_EQ(last.streamed_bytes, 200u);
  EXPECT_EQ(last.received_bytes, 400u);
  EXPECT_EQ(last.done_bytes(), 700u);
  EXPECT_EQ(last.total_bytes, 600u);
  EXPECT_EQ(last.tensors_done, 2u);
  EXPECT_EQ(last.tensors_total, 3u);
  EXPECT_GE(last.seconds, 0.1);
}

TEST(ProgressMeter, ACallbackThatThrowsIsCalledNoMore) {
  int calls = 0;  // only the meter's threads, one after the other
  std::unique_ptr<ProgressMeter> meter = ProgressMeter::Start(
      [&calls](const LoadProgress&) {
        ++calls;
        throw 7;  // not even a std::exception
      },
      absl::Milliseconds(10), {.bytes = 1});
  absl::SleepFor(absl::Milliseconds(50));
  meter->AddDirect(1);
  meter.reset();
  EXPECT_EQ(calls, 1);
}

TEST(ProgressMeter, ASlowCallbackHoldsUpNoCount) {
  std::atomic<int> calls{0};
  std::unique_ptr<ProgressMeter> meter = ProgressMeter::Start(
      [&calls](const LoadProgress&) {
        ++calls;
        absl::SleepFor(absl::Milliseconds(300));
      },
      absl::Milliseconds(10), {.bytes = 1000});
  while (calls.load() == 0) absl::SleepFor(absl::Milliseconds(1));
  // The callback sleeps now; counting goes on without it.
  const absl::Time before = absl::Now();
  for (int i = 0; i < 1000; ++i) meter->AddDirect(1);
  EXPECT_LT(absl::Now() - before, absl::Milliseconds(100));
  EXPECT_EQ(meter->Snapshot().direct_bytes, 1000u);
  meter.reset();
}

TEST(ProgressMeter, ATotalCorrectedBelowZeroReadsZero) {
  std::unique_ptr<ProgressMeter> meter =
      ProgressMeter::Start([](const LoadProgress&) {}, absl::Seconds(1), {.bytes = 10});
  meter->AdjustTotalBytes(-20);
  EXPECT_EQ(meter->Snapshot().total_bytes, 0u);
}

}  // namespace
}  // namespace metaload
