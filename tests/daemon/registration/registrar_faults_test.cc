// Registration reads a checkpoint's tensor bytes through the daemon's FileSystem (ServiceSeams),
// with --digest (daemon/registration/tensor_digests.h).
// A disk that fails under the digests fails the registration with DATA_LOSS naming the tensor,
// the file and the byte; without digests no tensor byte is read, so the same disk registers.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "planner/format/checkpoint.h"
#include "tests/daemon/service/checkpoint_daemon.h"
#include "tests/faults/fault_file_system.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

TEST(RegistrationFaults, AnEioUnderTheDigestsFailsTheRegistrationNamingTensorFileAndByte) {
  testing::TempDir dir;
  const std::string root = std::filesystem::canonical(dir.path()).string();
  const std::string checkpoint = root + "/m";
  ASSERT_TRUE(testing::WriteTestCheckpoint(checkpoint, {"a.weight", "b.weight"}, 64 << 10).ok());
  absl::StatusOr<Checkpoint> layout = OpenCheckpoint(checkpoint);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const uint64_t eio_at = layout->Find("b.weight")->begin_offset + 100;
  FaultFileSystem disk;
  disk.Add({.kind = FileFault::kEio, .path_suffix = "/m/model.safetensors", .at_byte = eio_at});
  testing::CheckpointDaemon daemon("node-a", root, &disk);

  EXPECT_TRUE(daemon.Register("plain", checkpoint).ok()) << "no tensor byte is read without --digest";
  EXPECT_EQ(disk.faults_injected(), 0u);
  absl::Status digested = daemon.Register("digested", checkpoint, /*digest=*/true);
  EXPECT_EQ(digested.code(), absl::StatusCode::kDataLoss) << digested;
  // The digests read each file in large blocks from its first tensor on: a.weight's block
  // reaches the failing byte.
  EXPECT_EQ(digested.message(),
            absl::StrCat("RegisterModel: computing the digest of a.weight: reading ", checkpoint,
                         "/model.safetensors at ", eio_at, ": Input/output error"));
  disk.Clear();
  EXPECT_TRUE(daemon.Register("digested", checkpoint, /*digest=*/true).ok()) << "the disk works again";
}

}  // namespace
}  // namespace metaload
