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
#include "util/hash/tile_digest.h"

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

// The proofs of what each rank read travel through the same Gloo group as the reports: two
// ranks holding a tensor's halves prove it together; a third tensor read with no digest, an
// initialized one and a computed buffer are counted, and "content proven" is not said.
TEST(Verify, ProofsOfHalvesAreCheckedTogetherOverGloo) {
  TensorLayout w;
  w.name = "w";
  w.dtype = DType::kU8;
  w.shape = {4, 256};
  w.begin_offset = 0;
  w.end_offset = 1024;
  w.index = 0;
  std::vector<uint8_t> bytes(1024);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  const TileGrid grid = TileGridFor(DigestKind::kFast, w.shape, 1);
  w.digest = TensorDigest{DigestKind::kFast, grid.tile_bytes,
                          LanesToBytes(DigestOf(DigestKind::kFast, grid, bytes))};
  TensorLayout plain = w;
  plain.name = "plain";
  plain.index = 1;
  plain.digest.reset();
  const auto load = [&](RankLoad& mine) {
    LoadedTensor half;
    half.name = "w";
    half.tensor = torch::zeros({2, 256}, torch::kUInt8);
    half.filled = true;
    half.provenance.kind = Provenance::Kind::kDirect;
    half.proof = ProofTemplate(w);
    const uint64_t from = static_cast<uint64_t>(mine.rank) * 512;
    TileProof tiles(DigestKind::kFast, grid, {{from, 512, 512, 1}});
    tiles.Add(from, absl::MakeConstSpan(bytes).subspan(from, 512));
    half.proof->sum = tiles.Finish();
    mine.tensors.push_back(half);
    LoadedTensor read = half;
    read.name = "plain";
    read.proof = ProofTemplate(plain);
    mine.tensors.push_back(read);
    LoadedTensor buffer;
    buffer.name = "inv_freq";
    buffer.tensor = torch::zeros({2});
    buffer.filled = true;
    buffer.provenance.kind = Provenance::Kind::kBuffer;
    mine.tensors.push_back(buffer);
  };
  const std::vector<absl::StatusOr<VerifyOutcome>> results =
      VerifyTwoRanks("cpu", "verify_test_proofs", load);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(results[rank].ok()) << results[rank].status();
    EXPECT_TRUE(results[rank]->ok()) << results[rank]->Message(2);
    EXPECT_EQ(results[rank]->stored_checked, 1);
    EXPECT_EQ(results[rank]->stored_no_digest, 1);
    EXPECT_FALSE(results[rank]->proven());
    EXPECT_EQ(
        results[rank]->ContentLine(),
        "content not proven for every tensor: 1 stored tensor checked against their registered fast digests, "
        "1 read without a digest (register the model with digests to check them); counted on each rank "
        "holding "
        "one: 2 buffers computed");
  }
}

}  // namespace
}  // namespace metaload
