// The daemon's worker threads: every job runs, a full queue refuses instead of growing, and
// destruction runs what was queued.
#include "daemon/exec/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>

#include "absl/synchronization/notification.h"

namespace metaload {
namespace {

TEST(WorkQueue, RunsEveryJobPosted) {
  std::atomic<int> done{0};
  {
    WorkQueue queue("test", 3, 1000);
    for (int i = 0; i < 500; ++i) ASSERT_TRUE(queue.Post([&done] { done.fetch_add(1); }));
  }  // the destructor runs what is still queued
  EXPECT_EQ(done.load(), 500);
}

TEST(WorkQueue, FullQueueRefusesNewJobs) {
  absl::Notification release;
  absl::Notification started;
  WorkQueue queue("test", 1, 2);
  ASSERT_TRUE(queue.Post([&] {
    started.Notify();
    release.WaitForNotification();
  }));
  started.WaitForNotification();  // the one worker is busy; the queue holds what follows
  EXPECT_TRUE(queue.Post([] {}));
  EXPECT_TRUE(queue.Post([] {}));
  EXPECT_FALSE(queue.Post([] {})) << "a third queued job must be refused";
  EXPECT_EQ(queue.queued(), 2u);
  release.Notify();
}

}  // namespace
}  // namespace metaload
