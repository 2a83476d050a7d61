#include "util/fs/file_stamp.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "tests/test_support.h"
#include "util/fs/file_system.h"

namespace metaload {
namespace {

constexpr int64_t kRegistered = 1796054400000000000;  // 2026-11-30T16:00:00Z
constexpr int64_t kLater = 1796058062123000000;       // 2026-11-30T17:01:02.123Z

TEST(FileStampTest, FormatsMtimeAsUtcWithTheDigitsItHas) {
  EXPECT_EQ(FormatMtime(kRegistered), "2026-11-30T16:00:00Z");
  EXPECT_EQ(FormatMtime(kLater), "2026-11-30T17:01:02.123Z");
  EXPECT_EQ(FormatMtime(kRegistered + 5), "2026-11-30T16:00:00.000000005Z");
}

TEST(FileStampTest, ANewerMtimeIsFailedPreconditionNamingFileAndBothTimes) {
  absl::Status s = CheckUnchangedSinceRegistration("/ckpt/a.safetensors", {123, kLater}, {123, kRegistered});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "/ckpt/a.safetensors changed since it was registered: mtime 2026-11-30T17:01:02.123Z, registered "
            "2026-11-30T16:00:00Z (size 123 bytes, as registered); run `metactl register --refresh NAME`");
}

TEST(FileStampTest, AnotherSizeIsNamedWithTheMtimeAsRegistered) {
  absl::Status s =
      CheckUnchangedSinceRegistration("/ckpt/a.safetensors", {130, kRegistered}, {123, kRegistered});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "/ckpt/a.safetensors changed since it was registered: size 130 bytes, registered 123 (mtime "
            "2026-11-30T16:00:00Z, as registered); run `metactl register --refresh NAME`");
}

TEST(FileStampTest, BothChangedAreBothNamed) {
  absl::Status s = CheckUnchangedSinceRegistration("/x", {1, kLater}, {2, kRegistered});
  EXPECT_NE(s.message().find("size 1 bytes, registered 2; mtime 2026-11-30T17:01:02.123Z, registered"),
            absl::string_view::npos)
      << s;
}

TEST(FileStampTest, EqualOrUnrecordedStampsPass) {
  EXPECT_TRUE(CheckUnchangedSinceRegistration("/x", {123, kRegistered}, {123, kRegistered}).ok());
  EXPECT_TRUE(CheckUnchangedSinceRegistration("/x", {999, kLater}, {}).ok());
  EXPECT_TRUE(CheckSameFileSinceRegistration("/x", {999, kLater, 1, 2, kLater}, {}).ok());
}

// A file of another user renamed over the registered one, its size and mtime copied: only the
// host that stamped it can tell, by its inode and ctime.
const FileStamp kStamped{123, kRegistered, /*device=*/makedev(259, 2), /*inode=*/5, kRegistered};
const FileStamp kSwapped{123, kRegistered, makedev(259, 2), /*inode=*/7, kLater};

TEST(FileStampTest, AnotherInodeOrCtimeIsAnotherFileForTheHostThatStampedIt) {
  absl::Status s = CheckSameFileSinceRegistration("/ckpt/a.safetensors", kSwapped, kStamped, "llama");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "/ckpt/a.safetensors changed since it was registered: inode 7, registered 5; ctime "
            "2026-11-30T17:01:02.123Z, registered 2026-11-30T16:00:00Z (size 123 bytes, as registered; mtime "
            "2026-11-30T16:00:00Z, as registered); run `metactl register --refresh llama`");
  FileStamp moved = kStamped;
  moved.device = makedev(8, 1);
  EXPECT_EQ(
      CheckSameFileSinceRegistration("/x", moved, kStamped).message(),
      "/x changed since it was registered: device 8:1, registered 259:2 (size 123 bytes, as registered; "
      "mtime 2026-11-30T16:00:00Z, as registered); run `metactl register --refresh NAME`");
  // Written in place with its mtime set back: the same inode, a later ctime.
  FileStamp rewritten = kStamped;
  rewritten.ctime_ns = kLater;
  EXPECT_EQ(CheckSameFileSinceRegistration("/x", rewritten, kStamped).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(CheckSameFileSinceRegistration("/x", kStamped, kStamped).ok());
}

TEST(FileStampTest, ReadersOnOtherHostsCompareOnlySizeAndMtime) {
  EXPECT_TRUE(CheckUnchangedSinceRegistration("/x", kSwapped, kStamped).ok())
      << "another host's device and inode say nothing of the file it mounts";
}

TEST(FileStampTest, AStampWithoutIdentityIsComparedBySizeAndMtime) {
  // Registered before stamps held device, inode and ctime.
  EXPECT_TRUE(CheckSameFileSinceRegistration("/x", kSwapped, {123, kRegistered}).ok());
  EXPECT_EQ(CheckSameFileSinceRegistration("/x", kSwapped, {124, kRegistered}).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(FileStampTest, StampOfARealFileHoldsItsDeviceInodeAndCtime) {
  testing::TempDir dir;
  testing::WriteFileOrDie(dir.File("a"), "bytes");
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file = FileSystem::Default()->Open(dir.File("a"));
  ASSERT_TRUE(file.ok()) << file.status();
  struct stat st;
  ASSERT_EQ(::stat(dir.File("a").c_str(), &st), 0);
  const FileStamp stamp = StampOf(**file);
  EXPECT_EQ(stamp.size_bytes, 5u);
  EXPECT_EQ(stamp.device, st.st_dev);
  EXPECT_EQ(stamp.inode, st.st_ino);
  EXPECT_EQ(stamp.ctime_ns, st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec);
  EXPECT_TRUE(stamp.identity_recorded());
}

}  // namespace
}  // namespace metaload
