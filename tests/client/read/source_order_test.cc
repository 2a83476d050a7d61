// The failover policy (client/read/source_order.h): which errors are retried, in which order sources
// are tried, how long a repeat waits, and when a piece gives up.
#include "client/read/source_order.h"

#include <gtest/gtest.h>

#include <vector>

namespace metaload {
namespace {

TEST(ClassifyReadFailure, TheRequestsOwnFaultIsNeverRetried) {
  for (absl::StatusCode code :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kNotFound, absl::StatusCode::kPermissionDenied,
        absl::StatusCode::kFailedPrecondition, absl::StatusCode::kOutOfRange}) {
    EXPECT_EQ(ClassifyReadFailure(code), ReadFailure::kFatal) << absl::StatusCodeToString(code);
  }
  for (absl::StatusCode code : {absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded,
                                absl::StatusCode::kResourceExhausted, absl::StatusCode::kInternal,
                                absl::StatusCode::kUnknown, absl::StatusCode::kAborted}) {
    EXPECT_EQ(ClassifyReadFailure(code), ReadFailure::kRetry) << absl::StatusCodeToString(code);
  }
  EXPECT_EQ(ClassifyReadFailure(absl::StatusCode::kDataLoss), ReadFailure::kDataLoss);
}

TEST(SourceCursor, MovesToTheNextSourceAtOnceAndBacksOffOnlyWhenComingBack) {
  SourceCursor cursor(2, RetryPolicy{});
  std::vector<size_t> order{cursor.current()};
  std::vector<absl::Duration> waits;
  for (;;) {
    RetryStep step = cursor.OnFailure(absl::StatusCode::kUnavailable, false);
    if (step.give_up) break;
    order.push_back(step.next);
    waits.push_back(step.backoff);
  }
  // 3 rounds over 2 sources: 6 attempts, then it gives up.
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(waits, (std::vector<absl::Duration>{absl::ZeroDuration(), absl::Milliseconds(100),
                                                absl::Milliseconds(200), absl::Milliseconds(400),
                                                absl::Milliseconds(800)}));
}

TEST(SourceCursor, OneServerGetsTimeToRestartAndTheBackoffIsCapped) {
  SourceCursor cursor(1, RetryPolicy{});
  absl::Duration total;
  std::vector<absl::Duration> waits;
  for (;;) {
    RetryStep step = cursor.OnFailure(absl::StatusCode::kUnavailable, false);
    if (step.give_up) break;
    EXPECT_EQ(step.next, 0u);
    waits.push_back(step.backoff);
    total += step.backoff;
  }
  EXPECT_EQ(waits.size(), 5u) << "min_attempts: 6 tries of the only server";
  EXPECT_EQ(waits.back(), absl::Milliseconds(1600)) << "100 ms doubled, capped at 1.6 s";
  EXPECT_EQ(total, absl::Milliseconds(3100));
}

TEST(SourceCursor, ProgressStartsTheCountAfresh) {
  SourceCursor cursor(1, RetryPolicy{});
  for (int i = 0; i < 20; ++i) {
    RetryStep step = cursor.OnFailure(absl::StatusCode::kUnavailable, /*progressed=*/true);
    ASSERT_FALSE(step.give_up) << "a stream that keeps delivering bytes is resumed, attempt " << i;
    EXPECT_EQ(step.backoff, absl::Milliseconds(100));
  }
}

TEST(SourceCursor, FatalErrorsGiveUpAtOnce) {
  SourceCursor cursor(3, RetryPolicy{});
  EXPECT_TRUE(cursor.OnFailure(absl::StatusCode::kFailedPrecondition, false).give_up);
  SourceCursor other(3, RetryPolicy{});
  EXPECT_TRUE(other.OnFailure(absl::StatusCode::kNotFound, true).give_up);
}

TEST(SourceCursor, DataLossIsRetriedFromAnotherSourceOnce) {
  SourceCursor cursor(3, RetryPolicy{});
  RetryStep first = cursor.OnFailure(absl::StatusCode::kDataLoss, false);
  ASSERT_FALSE(first.give_up);
  EXPECT_EQ(first.next, 1u);
  EXPECT_TRUE(cursor.OnFailure(absl::StatusCode::kDataLoss, false).give_up);
}

TEST(SourceHealth, SourcesThatFailedLatelyGoLastUntilTheCooldownPasses) {
  SourceHealth health(absl::Seconds(2));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const std::vector<std::string> sources{"a:1", "b:1", "c:1"};
  EXPECT_EQ(health.Order(sources, t0), (std::vector<size_t>{0, 1, 2}));
  health.MarkFailed("a:1", t0);
  EXPECT_EQ(health.Order(sources, t0 + absl::Seconds(1)), (std::vector<size_t>{1, 2, 0}));
  EXPECT_EQ(health.Order(sources, t0 + absl::Seconds(3)), (std::vector<size_t>{0, 1, 2})) << "it may be back";
  health.MarkFailed("b:1", t0);
  health.MarkOk("b:1");
  EXPECT_EQ(health.Order(sources, t0 + absl::Seconds(1)), (std::vector<size_t>{1, 2, 0}));
}

}  // namespace
}  // namespace metaload
