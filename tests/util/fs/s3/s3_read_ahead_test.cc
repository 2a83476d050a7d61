// The read-ahead of a daemon's object streams (util/fs/s3/s3_read_ahead.h) against a fetch over
// bytes in memory: what it answers, what it fetches, what it holds, how it stops.
#include "util/fs/s3/s3_read_ahead.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <vector>

#include "absl/synchronization/notification.h"

namespace metaload {
namespace {

constexpr uint64_t kPart = 1000;

std::vector<uint8_t> Object(size_t size) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(i * 7 + i / 251);
  return bytes;
}

// A fetch over `object` that records each part asked for.
struct Recorder {
  const std::vector<uint8_t>* object;
  absl::Mutex mu;
  std::vector<std::pair<uint64_t, uint64_t>> fetched ABSL_GUARDED_BY(mu);
  S3ReadAhead::Fetch Fetch() {
    return [this](uint64_t offset, absl::Span<uint8_t> out, const std::atomic<bool>*) {
      {
        absl::MutexLock lock(&mu);
        fetched.emplace_back(offset, out.size());
      }
      std::copy_n(object->begin() + offset, out.size(), out.begin());
      return absl::OkStatus();
    };
  }
};

TEST(S3ReadAhead, ChunksComeFromWholePartsAndEqualTheObject) {
  const std::vector<uint8_t> object = Object(10'500);
  Recorder recorder{&object};
  ReadAheadBudget budget(1 << 20);
  {
    S3ReadAhead ahead(250, 10'500, kPart, 4, &budget, recorder.Fetch());
    std::vector<uint8_t> got(10'250);
    for (uint64_t at = 0; at < got.size(); at += 300) {  // chunks that straddle parts
      const size_t n = std::min<size_t>(300, got.size() - at);
      std::optional<absl::Status> read = ahead.Read(250 + at, absl::MakeSpan(got.data() + at, n));
      ASSERT_TRUE(read.has_value());
      ASSERT_TRUE(read->ok()) << *read;
    }
    EXPECT_TRUE(std::equal(got.begin(), got.end(), object.begin() + 250));
    EXPECT_EQ(ahead.fetches(), 11u);
  }
  absl::MutexLock lock(&recorder.mu);
  std::sort(recorder.fetched.begin(), recorder.fetched.end());
  ASSERT_EQ(recorder.fetched.size(), 11u);  // each byte of the span fetched once, in parts
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(recorder.fetched[i], std::make_pair(250 + i * kPart, kPart));
  EXPECT_EQ(recorder.fetched[10], std::make_pair(uint64_t{10'250}, uint64_t{250}));
  EXPECT_EQ(budget.used_bytes(), 0u);  // everything given back
}

TEST(S3ReadAhead, HoldsNoMoreThanTheBudgetAndThePartAReaderWaitsFor) {
  const std::vector<uint8_t> object = Object(20'000);
  Recorder recorder{&object};
  for (uint64_t limit : {uint64_t{0}, 2 * kPart, 5 * kPart}) {
    ReadAheadBudget budget(limit);
    S3ReadAhead ahead(0, object.size(), kPart, 8, &budget, recorder.Fetch());
    std::vector<uint8_t> got(object.size());
    for (uint64_t at = 0; at < got.size(); at += 100) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // a slow reader: fetchers run ahead
      ASSERT_TRUE(ahead.Read(at, absl::MakeSpan(got.data() + at, 100))->ok());
    }
    EXPECT_EQ(got, object) << limit;
    EXPECT_LE(budget.peak_bytes(), limit + kPart) << limit;
    EXPECT_GE(budget.peak_bytes(), std::max(limit, kPart)) << limit;  // it did read ahead to the limit
  }
}

TEST(S3ReadAhead, ReadsItCannotAnswerAreLeftToTheCaller) {
  const std::vector<uint8_t> object = Object(5'000);
  Recorder recorder{&object};
  ReadAheadBudget budget(1 << 20);
  S3ReadAhead ahead(1'000, 4'000, kPart, 2, &budget, recorder.Fetch());
  std::vector<uint8_t> got(500);
  EXPECT_FALSE(ahead.Read(999, absl::MakeSpan(got)).has_value());              // before the span
  EXPECT_FALSE(ahead.Read(3'501, absl::MakeSpan(got)).has_value());            // past its end
  EXPECT_FALSE(ahead.Read(UINT64_MAX - 10, absl::MakeSpan(got)).has_value());  // offset + size overflows
  ASSERT_TRUE(ahead.Read(2'100, absl::MakeSpan(got))->ok());  // skips ahead: starts again there
  EXPECT_TRUE(std::equal(got.begin(), got.end(), object.begin() + 2'100));
  EXPECT_FALSE(ahead.Read(1'000, absl::MakeSpan(got)).has_value());  // read past: gone
  ASSERT_TRUE(ahead.Read(2'600, absl::MakeSpan(got))->ok());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), object.begin() + 2'600));
  EXPECT_TRUE(ahead.Read(0, absl::Span<uint8_t>())->ok());
}

TEST(S3ReadAhead, AFailedPartIsTheReadersErrorAndStopsFetching) {
  std::atomic<int> calls{0};
  ReadAheadBudget budget(1 << 20);
  S3ReadAhead ahead(0, 10 * kPart, kPart, 1, &budget,
                    [&](uint64_t offset, absl::Span<uint8_t> out, const std::atomic<bool>*) {
                      ++calls;
                      if (offset == 2 * kPart)
                        return absl::DataLossError("s3://b/k changed since it was opened");
                      std::fill(out.begin(), out.end(), 1);
                      return absl::OkStatus();
                    });
  std::vector<uint8_t> got(3 * kPart);
  std::optional<absl::Status> read = ahead.Read(0, absl::MakeSpan(got));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(*read, absl::DataLossError("s3://b/k changed since it was opened"));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(calls.load(), 3);  // one fetcher, in order: nothing started after the failed part
  // A later read past the failure is told it too, never left waiting.
  read = ahead.Read(5 * kPart, absl::MakeSpan(got.data(), 10));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(*read, absl::DataLossError("s3://b/k changed since it was opened"));
}

TEST(S3ReadAhead, DestructionCancelsFetchesInFlight) {
  ReadAheadBudget budget(1 << 20);
  absl::Notification started;
  // Up to 4 fetches run at once: the first to start says so, once (a check of HasBeenNotified
  // before Notify let two of them notify, which aborts the process: seen in a fresh clone's run).
  std::atomic<bool> first{true};
  auto ahead = std::make_unique<S3ReadAhead>(
      0, 4 * kPart, kPart, 4, &budget,
      [&](uint64_t, absl::Span<uint8_t>, const std::atomic<bool>* cancelled) {
        if (first.exchange(false)) started.Notify();
        while (!cancelled->load())
          std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a stalled GET
        return absl::CancelledError("cancelled");
      });
  started.WaitForNotification();
  const auto before = std::chrono::steady_clock::now();
  ahead.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::seconds(2));
  EXPECT_EQ(budget.used_bytes(), 0u);
}

TEST(S3ReadAhead, StopEndsAWaitingReaderAndTheStalledFetch) {
  ReadAheadBudget budget(1 << 20);
  std::atomic<bool> fetch_saw_cancel{false};
  S3ReadAhead ahead(0, 4 * kPart, kPart, 2, &budget,
                    [&](uint64_t, absl::Span<uint8_t>, const std::atomic<bool>* cancelled) {
                      while (!cancelled->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                      fetch_saw_cancel = true;
                      return absl::CancelledError("GET cancelled");
                    });
  std::optional<absl::Status> read;
  std::thread reader([&] {
    std::vector<uint8_t> got(100);
    read = ahead.Read(0, absl::MakeSpan(got));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ahead.Stop();
  reader.join();
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(*read, absl::CancelledError("the read was cancelled"));
  std::vector<uint8_t> got(100);
  EXPECT_EQ(ahead.Read(100, absl::MakeSpan(got)), absl::CancelledError("the read was cancelled"));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(fetch_saw_cancel.load());
}

TEST(S3ReadAhead, ReadersSharingAFullBudgetAllFinish) {
  // Each read-ahead's parts ahead fill the budget; a reader of the other still gets its part.
  const std::vector<uint8_t> object = Object(8'000);
  Recorder recorder{&object};
  ReadAheadBudget budget(kPart);
  S3ReadAhead first(0, object.size(), kPart, 4, &budget, recorder.Fetch());
  S3ReadAhead second(0, object.size(), kPart, 4, &budget, recorder.Fetch());
  std::vector<uint8_t> a(object.size()), b(object.size());
  for (uint64_t at = 0; at < object.size(); at += 500) {
    ASSERT_TRUE(first.Read(at, absl::MakeSpan(a.data() + at, 500))->ok());
    ASSERT_TRUE(second.Read(at, absl::MakeSpan(b.data() + at, 500))->ok());
  }
  EXPECT_EQ(a, object);
  EXPECT_EQ(b, object);
}

}  // namespace
}  // namespace metaload
