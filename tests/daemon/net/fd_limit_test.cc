// metad's descriptor limit at start (daemon/net/fd_limit.h).
#include "daemon/net/fd_limit.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

namespace metaload {
namespace {

TEST(FdLimit, SoftLimitIsRaisedToTheHardOne) {
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit lowered = saved;
  lowered.rlim_cur = saved.rlim_max / 2;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);
  const FdLimit limit = RaiseFdLimit();
  EXPECT_EQ(limit.soft, static_cast<uint64_t>(saved.rlim_max));
  EXPECT_EQ(limit.hard, static_cast<uint64_t>(saved.rlim_max));
  rlimit now{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &now), 0);
  EXPECT_EQ(now.rlim_cur, saved.rlim_max) << "in force, not only reported";
  ::setrlimit(RLIMIT_NOFILE, &saved);
}

}  // namespace
}  // namespace metaload
