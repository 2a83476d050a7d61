// Registration and serving through the storage seam (util/fs/storage.h) on a back end that is
// not POSIX: a daemon whose root is "mem://..." registers a checkpoint held in memory (its
// header, stamps and digests read through the in-memory FileSystem), streams a tensor's exact
// bytes, and keeps to its root on that back end as it does on a disk.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "client/read/daemon_client.h"
#include "planner/format/checkpoint.h"
#include "tests/daemon/service/checkpoint_daemon.h"
#include "tests/test_support.h"
#include "util/fs/memory_file_system.h"

namespace metaload {
namespace {

constexpr char kRoot[] = "mem://registrar-seam/models";

class RegistrationThroughTheSeam : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::WriteTestCheckpoint(dir_.File("m"), {"a.weight", "b.weight"}, 64 << 10).ok());
    file_ = testing::ReadFileOrDie(dir_.File("m/model.safetensors"));
    RegisteredMemoryFileSystem().Put(absl::StrCat(kRoot, "/m/model.safetensors"), file_);
    RegisteredMemoryFileSystem().Put("mem://registrar-seam/elsewhere/m/model.safetensors", file_);
  }

  testing::TempDir dir_;
  std::string file_;
};

TEST_F(RegistrationThroughTheSeam, AMemoryRootRegistersWithDigestsAndServesTheExactBytes) {
  testing::CheckpointDaemon daemon("node-a", kRoot, FileSystem::ByScheme());
  absl::Status registered = daemon.Register("m", absl::StrCat(kRoot, "/./m/"), /*digest=*/true);
  ASSERT_TRUE(registered.ok()) << registered;

  absl::StatusOr<Checkpoint> layout = OpenCheckpoint(absl::StrCat(kRoot, "/m"));
  ASSERT_TRUE(layout.ok()) << layout.status();
  const TensorLayout* b = layout->Find("b.weight");
  ASSERT_NE(b, nullptr);
  std::string got(b->end_offset - b->begin_offset, '\0');
  absl::Status read =
      DaemonClient(daemon.address(), ChunkChecksums::kRequired)
          .ReadRange("m", absl::StrCat(kRoot, "/m/model.safetensors"), b->begin_offset,
                     absl::MakeSpan(reinterpret_cast<uint8_t*>(got.data()), got.size()), absl::Seconds(30));
  ASSERT_TRUE(read.ok()) << read;
  EXPECT_EQ(got, file_.substr(b->begin_offset, got.size()));
}

TEST_F(RegistrationThroughTheSeam, ALocationOutsideTheRootIsRefusedOnEveryBackEnd) {
  testing::CheckpointDaemon daemon("node-a", kRoot, FileSystem::ByScheme());
  absl::Status outside = daemon.Register("o", "mem://registrar-seam/elsewhere/m");
  EXPECT_EQ(outside.code(), absl::StatusCode::kPermissionDenied) << outside;
  EXPECT_EQ(outside.message(),
            absl::StrCat("RegisterModel: \"mem://registrar-seam/elsewhere/m\" is not under "
                         "this daemon's roots [",
                         kRoot, "]"));
  // ".." is folded before the comparison: it cannot climb out of the root.
  absl::Status climbed = daemon.Register("c", absl::StrCat(kRoot, "/../elsewhere/m"));
  EXPECT_EQ(climbed.code(), absl::StatusCode::kPermissionDenied) << climbed;
  absl::Status relative = daemon.Register("r", "models/m");
  EXPECT_EQ(relative.code(), absl::StatusCode::kInvalidArgument) << relative;
  EXPECT_EQ(
      relative.message(),
      "RegisterModel: checkpoint \"models/m\" must be an absolute path or a scheme://location of at most "
      "4096 bytes");
  // Nor is a file outside the root served, registered model or not.
  std::string got(16, '\0');
  absl::Status read =
      DaemonClient(daemon.address(), ChunkChecksums::kRequired)
          .ReadRange("m", "mem://registrar-seam/elsewhere/m/model.safetensors", 0,
                     absl::MakeSpan(reinterpret_cast<uint8_t*>(got.data()), got.size()), absl::Seconds(30));
  EXPECT_FALSE(read.ok());
}

}  // namespace
}  // namespace metaload
