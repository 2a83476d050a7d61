// Verification's failure paths in one process, two ranks as two threads over a real TCPStore
// (client/verify/verify.h): a CUDA job on a machine without a usable GPU fails every rank cleanly,
// naming why, instead of hanging in ncclCommInitRank or ending in std::terminate.
#include "client/verify/verify.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/test_support.h"
#include "util/error_kind.h"

namespace metaload {
namespace {

// Verifies two ranks, as two threads over a real TCPStore; `load` is each rank's (its rank,
// world size and device are set here).
std::vector<absl::StatusOr<VerifyOutcome>> VerifyTwoRanks(const std::string& device,
                                                          const std::string& key_prefix,
                                                          const std::function<void(RankLoad&)>& load) {
  const int port = testing::FreeLoopbackPort();
  std::vector<absl::StatusOr<VerifyOutcome>> results(2, absl::UnknownError("not run"));
  std::thread ranks[2];
  for (int rank = 0; rank < 2; ++rank) {
    ranks[rank] = std::thread([&, rank] {
      RankLoad mine;
      mine.rank = rank;
      mine.world_size = 2;
      mine.device = device;
      load(mine);
      VerifyOptions options;
      options.master_port = port;
      options.timeout = absl::Seconds(20);
      options.device = device;
      options.key_prefix = key_prefix;
      results[rank] = VerifyAcrossRanks(mine, options);
    });
  }
  for (std::thread& t : ranks) t.join();
  return results;
}

TEST(Verify, CudaRanksWithoutAUsableGpuFailEveryRankNamingWhy) {
  const std::vector<absl::StatusOr<VerifyOutcome>> results = VerifyTwoRanks(
      "cuda:0", "verify_test", [](RankLoad& load) { load.failures.push_back("could not load: a test"); });
  for (int rank = 0; rank < 2; ++rank) {
    const absl::StatusOr<VerifyOutcome>& r = results[rank];
    if (r.ok()) {
      // A machine with a GPU: NCCL ran, and both ranks learned that neither could load.
      EXPECT_EQ(r->backend, "nccl");
      EXPECT_EQ(r->failed_ranks, (std::vector<int>{0, 1}));
      continue;
    }
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
    // Not a tensor on meta: a rank without a usable GPU, state to fix (metactl exits 1).
    EXPECT_EQ(KindOf(r.status()), ErrorKind::kFailure) << r.status();
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

// `register --digest`: what each rank proved with the digests is summed in the same
// all-reduce, and the verdict says it; without digests it says nothing more.
TEST(Verify, DigestCountsAreSummedOverRanksIntoTheVerdict) {
  const auto load = [](RankLoad& mine) {
    mine.has_digests = true;
    for (DigestCheck check :
         {DigestCheck::kMatched, DigestCheck::kMatched, DigestCheck::kSliced, DigestCheck::kNone}) {
      LoadedTensor t;
      t.name = absl::StrCat("t", mine.tensors.size());
      t.tensor = torch::zeros({2});
      t.filled = true;
      t.digest = check;
      mine.tensors.push_back(std::move(t));
    }
  };
  const std::vector<absl::StatusOr<VerifyOutcome>> results =
      VerifyTwoRanks("cpu", "verify_test_digests", load);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(results[rank].ok()) << results[rank].status();
    EXPECT_TRUE(results[rank]->ok());
    EXPECT_EQ(results[rank]->digest_matched_count, 4);
    EXPECT_EQ(results[rank]->digest_sliced_count, 2);
    EXPECT_EQ(results[rank]->DigestVerdict(),
              "; bytes of 4 tensors match the registered digests (2 sliced tensors not checked)");
  }
  VerifyOutcome without;
  EXPECT_EQ(without.DigestVerdict(), "") << "without digests the verdict stays as it was";
  VerifyOutcome on_cuda;
  on_cuda.has_digests = true;
  on_cuda.digest_on_device_count = 1;
  EXPECT_EQ(on_cuda.DigestVerdict(),
            "; bytes of 0 tensors match the registered digests (1 tensor on CUDA not checked)");
}

}  // namespace
}  // namespace metaload
