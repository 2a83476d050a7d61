#include "util/fs/file_stamp.h"

#include <gtest/gtest.h>

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
}

}  // namespace
}  // namespace metaload
