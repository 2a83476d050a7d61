// DaemonClient's ReadRange streams (client/read/daemon_client.h) from a real metad service in
// this process, long enough that chunks queue between gRPC's thread, which receives them, and
// the caller's, which copies them out (at most a few wait; a full queue stops reading until
// the caller takes one). Each test names the bytes that must arrive or the exact error.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/read/daemon_client.h"
#include "tests/daemon/service/checkpoint_daemon.h"
#include "tests/faults/chunk_fault.h"
#include "tests/faults/serving_faults.h"
#include "tests/test_support.h"
#include "util/hash/crc32c.h"
#include "util/units.h"

namespace metaload {
namespace {

constexpr int64_t kStreamTensorBytes = 32 << 20;  // 32 one-MiB chunks per tensor

class DaemonStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::canonical(dir_.path()).string();
    ASSERT_TRUE(
        testing::WriteTestCheckpoint(root_ + "/m", {"a.weight", "b.weight"}, kStreamTensorBytes).ok());
    path_ = root_ + "/m/model.safetensors";
    file_bytes_ = testing::ReadFileOrDie(path_);
    // Both tensors, back to back, end at the end of the file.
    first_ = file_bytes_.size() - 2 * kStreamTensorBytes;
  }

  // [offset, offset + bytes) of the file streamed by `client` into fresh memory (never touched
  // before the stream: its first-touch faults land in the copies, as a rank's tensors' do).
  absl::Status Stream(DaemonClient& client, uint64_t offset, uint64_t bytes, std::string* out,
                      uint64_t* received = nullptr, const std::atomic<bool>* cancelled = nullptr) {
    std::unique_ptr<uint8_t[]> dest(new uint8_t[bytes]);
    absl::Status status = client.ReadRuns("m", path_, StridedRuns{offset, bytes, bytes, 1}, 0,
                                          absl::MakeSpan(dest.get(), bytes), absl::Seconds(60), cancelled,
                                          FileStamp{}, received);
    out->assign(reinterpret_cast<const char*>(dest.get()), bytes);
    return status;
  }

  testing::TempDir dir_;
  std::string root_, path_, file_bytes_;
  uint64_t first_ = 0;
};

TEST_F(DaemonStreamTest, FourStreamsAtOnceOnOneClientDeliverEveryByteInOrder) {
  testing::CheckpointDaemon daemon("node-a", root_);
  ASSERT_TRUE(daemon.Register("m", root_ + "/m").ok());
  DaemonClient client(daemon.address());
  constexpr uint64_t kQuarter = kStreamTensorBytes / 2;
  std::vector<std::string> got(4);
  std::vector<absl::Status> status(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] { status[i] = Stream(client, first_ + i * kQuarter, kQuarter, &got[i]); });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(status[i].ok()) << status[i];
    EXPECT_TRUE(got[i] == file_bytes_.substr(first_ + i * kQuarter, kQuarter)) << "stream " << i;
  }
}

// A chunk corrupted in flight, deep into a stream whose earlier chunks may still be queued:
// the bytes before it are kept, the error names where, and the cancelled call ends (the
// client's next stream works).
TEST_F(DaemonStreamTest, AChunkCorruptedDeepInAStreamIsDataLossAfterExactlyTheBytesBeforeIt) {
  absl::StatusOr<ChunkFault> twentieth = ChunkFault::Parse("20");
  ASSERT_TRUE(twentieth.ok());
  ServingFaults faults(*twentieth);
  testing::CheckpointDaemon daemon("node-a", root_, FileSystem::Default(), &faults);
  ASSERT_TRUE(daemon.Register("m", root_ + "/m").ok());
  DaemonClient client(daemon.address());
  std::string got;
  uint64_t received = 0;
  const absl::Status broken = Stream(client, first_, 2 * kStreamTensorBytes, &got, &received);
  ASSERT_EQ(broken.code(), absl::StatusCode::kDataLoss) << broken;
  const uint64_t at = first_ + 19 * kMiB;
  const std::string sent = file_bytes_.substr(at, kMiB);
  const uint32_t sent_crc = Crc32c(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(sent.data()), kMiB));
  EXPECT_EQ(broken.message().substr(0, broken.message().find(", 0x")),
            absl::StrFormat("checksum mismatch in %s at bytes [%d, %d) from %s (CRC-32C 0x%08x sent", path_,
                            at, at + kMiB, daemon.address(), sent_crc));
  EXPECT_EQ(received, 19 * kMiB);
  EXPECT_TRUE(got.substr(0, received) == file_bytes_.substr(first_, received));

  const absl::Status again = Stream(client, first_, 2 * kStreamTensorBytes, &got);
  EXPECT_TRUE(again.ok()) << again;
  EXPECT_TRUE(got == file_bytes_.substr(first_)) << "the stream after the broken one";
}

TEST_F(DaemonStreamTest, ACancelledStreamEndsCancelledAtOnceAndTheClientStreamsOn) {
  testing::CheckpointDaemon daemon("node-a", root_);
  ASSERT_TRUE(daemon.Register("m", root_ + "/m").ok());
  DaemonClient client(daemon.address());
  // Set before the first chunk: the client cancels at once, and must not wait for a pause in
  // the chunks to notice (they may never pause).
  std::atomic<bool> cancelled{true};
  std::string got;
  uint64_t received = 0;
  const absl::Time started = absl::Now();
  const absl::Status status = Stream(client, first_, 2 * kStreamTensorBytes, &got, &received, &cancelled);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_LT(received, 2 * kStreamTensorBytes);
  EXPECT_TRUE(got.substr(0, received) == file_bytes_.substr(first_, received));
  EXPECT_LT(absl::Now() - started, absl::Seconds(5));
  const absl::Status again = Stream(client, first_, kStreamTensorBytes, &got);
  EXPECT_TRUE(again.ok()) << again;
  EXPECT_TRUE(got == file_bytes_.substr(first_, kStreamTensorBytes));
}

}  // namespace
}  // namespace metaload
