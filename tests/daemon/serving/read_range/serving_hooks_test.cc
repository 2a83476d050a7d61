// ServingHooks (daemon/serving/read_range/serving_hooks.h) on a real MetadService in this
// process: each chunk a ReadRange stream serves is told to them, with the running total of bytes
// served; a chunk sent without its checksum is refused by a rank's client and accepted only by
// the measurement's; the corruption fault metad_faulty arms (tests/faults/serving_faults.h)
// flips a byte of the chunk it names after its checksum, which the client catches.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/read/daemon_client.h"
#include "tests/daemon/service/checkpoint_daemon.h"
#include "tests/faults/serving_faults.h"
#include "tests/test_support.h"
#include "util/units.h"

namespace metaload {
namespace {

constexpr int64_t kTensorBytes = 3 << 20;  // three chunks of chunk_size's default, 1 MiB

// Records what it is told; sends checksums unless told not to.
class RecordingHooks final : public ServingHooks {
 public:
  explicit RecordingHooks(bool checksums = true) : checksums_(checksums) {}
  bool ChecksumChunk() override { return checksums_; }
  void ChunkRead(absl::Span<uint8_t> payload) override {
    absl::MutexLock lock(&mu_);
    chunk_bytes_.push_back(payload.size());
  }
  void BytesServed(uint64_t served_bytes) override {
    absl::MutexLock lock(&mu_);
    served_.push_back(served_bytes);
  }
  std::vector<uint64_t> chunk_bytes() {
    absl::MutexLock lock(&mu_);
    return chunk_bytes_;
  }
  std::vector<uint64_t> served() {
    absl::MutexLock lock(&mu_);
    return served_;
  }

 private:
  const bool checksums_;
  absl::Mutex mu_;
  std::vector<uint64_t> chunk_bytes_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> served_ ABSL_GUARDED_BY(mu_);
};

class ServingHooksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::canonical(dir_.path()).string();
    ASSERT_TRUE(testing::WriteTestCheckpoint(root_ + "/m", {"w"}, kTensorBytes).ok());
    path_ = root_ + "/m/model.safetensors";
    const std::string file = testing::ReadFileOrDie(path_);
    offset_ = file.size() - kTensorBytes;  // the one tensor ends the file
    stored_ = file.substr(offset_);
  }

  // Streams the whole tensor from `daemon` (model "m", registered first) into `into`.
  absl::Status Stream(testing::CheckpointDaemon& daemon, std::string& into,
                      ChunkChecksums checksums = ChunkChecksums::kRequired) {
    if (absl::Status registered = daemon.Register("m", root_ + "/m"); !registered.ok()) return registered;
    into.assign(kTensorBytes, '\0');
    return DaemonClient(daemon.address(), checksums)
        .ReadRange("m", path_, offset_, absl::MakeSpan(reinterpret_cast<uint8_t*>(into.data()), into.size()),
                   absl::Seconds(30));
  }

  testing::TempDir dir_;
  std::string root_, path_, stored_;
  uint64_t offset_ = 0;
};

TEST_F(ServingHooksTest, EveryChunkIsToldToTheHooksWithTheRunningTotalOfBytesServed) {
  RecordingHooks hooks;
  testing::CheckpointDaemon daemon("node-a", root_, FileSystem::Default(), &hooks);
  std::string streamed;
  ASSERT_TRUE(Stream(daemon, streamed).ok());
  EXPECT_EQ(streamed, stored_);
  EXPECT_EQ(hooks.chunk_bytes(), (std::vector<uint64_t>{kMiB, kMiB, kMiB}));
  EXPECT_EQ(hooks.served(), (std::vector<uint64_t>{kMiB, 2 * kMiB, 3 * kMiB}));
}

TEST_F(ServingHooksTest, ChunksWithoutChecksumsAreRefusedByARankAndAcceptedOnlyByTheMeasurement) {
  RecordingHooks old_daemon(/*checksums=*/false);
  testing::CheckpointDaemon daemon("node-a", root_, FileSystem::Default(), &old_daemon);
  std::string streamed;
  absl::Status refused = Stream(daemon, streamed);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_EQ(refused.message(), absl::StrCat("a ReadRange chunk of ", path_, " from ", daemon.address(),
                                            " carries no checksum: that daemon is older than this client "
                                            "(metad and the client library ship together; upgrade it)"));
  ASSERT_TRUE(Stream(daemon, streamed, ChunkChecksums::kOptionalForMeasurement).ok());
  EXPECT_EQ(streamed, stored_);
}

TEST_F(ServingHooksTest, TheCorruptionFaultFlipsAByteOfTheChunkItNamesAfterItsChecksum) {
  absl::StatusOr<ChunkFault> second = ChunkFault::Parse("2");
  ASSERT_TRUE(second.ok()) << second.status();
  ServingFaults faults(*second);
  testing::CheckpointDaemon daemon("node-a", root_, FileSystem::Default(), &faults);
  std::string streamed;
  absl::Status corrupted = Stream(daemon, streamed);
  EXPECT_EQ(corrupted.code(), absl::StatusCode::kDataLoss) << corrupted;
  EXPECT_TRUE(absl::StartsWith(
      corrupted.message(), absl::StrCat("checksum mismatch in ", path_, " at bytes [", offset_ + kMiB, ", ",
                                        offset_ + 2 * kMiB, ") from ", daemon.address(), " (CRC-32C 0x")))
      << corrupted;
  ASSERT_TRUE(Stream(daemon, streamed).ok()) << "only the second chunk served is corrupted";
  EXPECT_EQ(streamed, stored_);
}

}  // namespace
}  // namespace metaload
