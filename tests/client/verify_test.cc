// Verification's failure paths in one process, two ranks as two threads over a real TCPStore
// (client/verify.h): a CUDA job on a machine without a usable GPU fails every rank cleanly,
// naming why, instead of hanging in ncclCommInitRank or ending in std::terminate.
#include "client/verify.h"



#include <gtest/gtest.h>

#include <thread>

#include "tests/test_support.h"

namespace metaload {
namespace {


TEST(Verify, CudaRanksWithoutAUsableGpuFailEveryRankNamingWhy) {
  const int port = testing::FreeLoopbackPort();
  absl::StatusOr<VerifyOutcome> results[2];
  std::thread ranks[2];
  for (int rank = 0; rank < 2; ++rank) {
    ranks[rank] = std::thread([&, rank] {
      RankLoad load;
      load.rank = rank;
      load.world_size = 2;
      load.device = "cuda:0";
      load.failures.push_back("could not load: a test");
      VerifyOptions options;
      options.master_port = port;
      options.timeout = absl::Seconds(20);
      options.device = "cuda:0";
      options.key_prefix = "verify_test";
      results[rank] = VerifyAcrossRanks(load, options);
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    const absl::StatusOr<VerifyOutcome>& r = results[rank];
    if (r.ok()) {
      // A machine with a GPU: NCCL ran, and both ranks learned that neither could load.
      EXPECT_EQ(r->backend, "nccl");
      EXPECT_EQ(r->failed_ranks, (std::vector<int>{0, 1}));
      continue;
    }
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
    EXPECT_NE(r.status().message().find("not every rank can take part in the NCCL all-reduce"),
              absl::string_view::npos)
        << r.status();
    EXPECT_NE(r.status().message().find("rank 0:"), absl::string_view::npos) << r.status();
  }
}

TEST(Verify, ARankThatNeverComesIsNamedAfterTheTimeout) {
  RankLoad load;
  load.rank = 0;
  load.world_size = 3;
  VerifyOptions options;
  options.master_port = testing::FreeLoopbackPort();
  options.timeout = absl::Seconds(2);
  options.key_prefix = "verify_test_alone";
  absl::StatusOr<VerifyOutcome> outcome = VerifyAcrossRanks(load, options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_FALSE(outcome->ok());
  EXPECT_EQ(outcome->never_joined, (std::vector<int>{1, 2}));
  EXPECT_EQ(outcome->Summary(3), "ranks 1, 2 never joined (3 ranks)");
}

}  // namespace
}  // namespace metaload
