// RetryWhileBusy: a busy answer is retried with doubling waits until the deadline; anything
// else comes back at once.
#include "client/read/busy_retry.h"

#include <gtest/gtest.h>

#include <vector>

#include "util/error_kind.h"

namespace metaload {
namespace {

struct Recorder {
  std::vector<absl::Duration> waits;
  void operator()(absl::Duration d) { waits.push_back(d); }
};

TEST(BusyRetry, RetriesBusyWithDoublingWaitsThenReturnsTheAnswer) {
  int calls = 0;
  Recorder sleep;
  absl::StatusOr<int> result = RetryWhileBusy(
      absl::Now() + absl::Hours(1),
      [&](absl::Time) -> absl::StatusOr<int> {
        if (++calls < 6) return absl::ResourceExhaustedError("the io queue holds 64 jobs; try again");
        return 7;
      },
      BusyBackoff{absl::Milliseconds(50), absl::Milliseconds(300)}, [&](absl::Duration d) { sleep(d); });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(*result, 7);
  EXPECT_EQ(calls, 6);
  EXPECT_EQ(sleep.waits, (std::vector<absl::Duration>{absl::Milliseconds(50), absl::Milliseconds(100),
                                                      absl::Milliseconds(200), absl::Milliseconds(300),
                                                      absl::Milliseconds(300)}));
}

TEST(BusyRetry, AnythingButBusyComesBackAtOnce) {
  for (const absl::Status& answer :
       {absl::InvalidArgumentError("bad"), absl::UnavailableError("connection refused"),
        absl::DataLossError("stream ended early"), TooLargeError("over max_request_size")}) {
    int calls = 0;
    Recorder sleep;
    const absl::Status result = RetryWhileBusy(
        absl::Now() + absl::Hours(1), [&](absl::Time) { return ++calls, answer; }, BusyBackoff{},
        [&](absl::Duration d) { sleep(d); });
    EXPECT_EQ(result, answer);
    EXPECT_EQ(calls, 1) << answer;
    EXPECT_TRUE(sleep.waits.empty()) << answer;
  }
}

TEST(BusyRetry, GivesUpWithTheBusyAnswerWhenTheNextWaitWouldPassTheDeadline) {
  int calls = 0;
  const absl::Status result = RetryWhileBusy(
      absl::Now() + absl::Milliseconds(120),
      [&](absl::Time) { return ++calls, TryAgainError("node-a is starting; try again"); },
      BusyBackoff{absl::Milliseconds(50), absl::Seconds(1)});
  EXPECT_TRUE(IsBusyError(result)) << result;
  EXPECT_EQ(result.message(), "node-a is starting; try again");
  EXPECT_GE(calls, 2);  // 0 ms and 50 ms; 150 ms would pass the deadline
  EXPECT_LE(calls, 3);
}

}  // namespace
}  // namespace metaload
