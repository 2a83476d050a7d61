// Root confinement and range reads: what keeps a daemon from serving files it must not.
#include "planner/file_io.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "tests/test_support.h"

namespace metaload {
namespace {

using ::metaload::testing::TempDir;
using ::metaload::testing::WriteFileOrDie;

TEST(ResolveUnderRoots, AcceptsFilesInsideARoot) {
  TempDir dir;
  WriteFileOrDie(dir.File("a.bin"), "x");
  auto path = ResolveUnderRoots(dir.File("./a.bin"), {dir.path()});
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir.File("a.bin"));
}

TEST(ResolveUnderRoots, RefusesDotDotEscape) {
  TempDir dir;
  ::mkdir(dir.File("root").c_str(), 0755);
  WriteFileOrDie(dir.File("secret"), "x");
  auto path = ResolveUnderRoots(dir.File("root/../secret"), {dir.File("root")});
  EXPECT_EQ(path.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(path.status().message().find("is not under this daemon's roots"), absl::string_view::npos);
}

TEST(ResolveUnderRoots, RefusesSymlinkOutOfTheRoot) {
  TempDir dir;
  ::mkdir(dir.File("root").c_str(), 0755);
  WriteFileOrDie(dir.File("secret"), "x");
  ASSERT_EQ(::symlink(dir.File("secret").c_str(), dir.File("root/link").c_str()), 0);
  EXPECT_EQ(ResolveUnderRoots(dir.File("root/link"), {dir.File("root")}).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(ResolveUnderRoots, RefusesSiblingWithSamePrefix) {
  TempDir dir;
  ::mkdir(dir.File("root").c_str(), 0755);
  ::mkdir(dir.File("root2").c_str(), 0755);
  WriteFileOrDie(dir.File("root2/f"), "x");
  EXPECT_EQ(ResolveUnderRoots(dir.File("root2/f"), {dir.File("root")}).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(ResolveUnderRoots, MissingFileIsNotFound) {
  TempDir dir;
  EXPECT_EQ(ResolveUnderRoots(dir.File("nope"), {dir.path()}).status().code(), absl::StatusCode::kNotFound);
}

TEST(ReadOnlyFile, ReadsExactRange) {
  TempDir dir;
  WriteFileOrDie(dir.File("f"), "0123456789");
  auto file = ReadOnlyFile::Open(dir.File("f"));
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->size_bytes(), 10u);
  uint8_t out[4];
  ASSERT_TRUE(file->ReadAt(3, absl::MakeSpan(out, 4)).ok());
  EXPECT_EQ(std::string(reinterpret_cast<char*>(out), 4), "3456");
}

// Bytes [position, +n) of runs "12", "56", "9a" (2 bytes every 4 from offset 1): the read may
// start and end inside a run.
TEST(ReadOnlyFile, ReadRunsGathersPartOfStridedRuns) {
  TempDir dir;
  WriteFileOrDie(dir.File("f"), "0123456789abcdef");
  auto file = ReadOnlyFile::Open(dir.File("f"));
  ASSERT_TRUE(file.ok());
  const StridedRuns runs{1, 2, 4, 3};
  uint8_t out[6];
  ASSERT_TRUE(file->ReadRuns(runs, 0, absl::MakeSpan(out, 6)).ok());
  EXPECT_EQ(std::string(reinterpret_cast<char*>(out), 6), "12569a");
  ASSERT_TRUE(file->ReadRuns(runs, 1, absl::MakeSpan(out, 4)).ok());
  EXPECT_EQ(std::string(reinterpret_cast<char*>(out), 4), "2569");
  absl::Status past = file->ReadRuns(runs, 3, absl::MakeSpan(out, 4));
  EXPECT_EQ(past.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(past.message().find("pass the 6 bytes of a slice"), absl::string_view::npos) << past;
}

TEST(ReadOnlyFile, RangePastEndIsOutOfRange) {
  TempDir dir;
  WriteFileOrDie(dir.File("f"), "0123456789");
  auto file = ReadOnlyFile::Open(dir.File("f"));
  uint8_t out[4];
  EXPECT_EQ(file->ReadAt(8, absl::MakeSpan(out, 4)).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(file->ReadAt(~0ull - 1, absl::MakeSpan(out, 4)).code(), absl::StatusCode::kOutOfRange);
}

TEST(ReadOnlyFile, TruncatedWhileOpenIsDataLoss) {
  TempDir dir;
  WriteFileOrDie(dir.File("f"), "0123456789");
  auto file = ReadOnlyFile::Open(dir.File("f"));
  ASSERT_EQ(::truncate(dir.File("f").c_str(), 5), 0);
  uint8_t out[4];
  absl::Status s = file->ReadAt(4, absl::MakeSpan(out, 4));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("the file was truncated"), absl::string_view::npos);
}

TEST(ReadOnlyFile, FolderIsNotARegularFile) {
  TempDir dir;
  EXPECT_EQ(ReadOnlyFile::Open(dir.path()).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace metaload
