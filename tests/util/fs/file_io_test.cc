// Root confinement and range reads: what keeps a daemon from serving files it must not.
#include "util/fs/file_io.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/time/clock.h"
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

// A FIFO where a checkpoint file was expected: opening it blocked until a writer came (issue 9:
// one FIFO under a root hung every thread of the daemon). Now it is refused at once.
TEST(ReadOnlyFile, FifoIsRefusedWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.File("model.safetensors").c_str(), 0644), 0);
  const absl::Time start = absl::Now();
  auto file = ReadOnlyFile::Open(dir.File("model.safetensors"));
  EXPECT_EQ(file.status().code(), absl::StatusCode::kFailedPrecondition) << file.status();
  EXPECT_NE(file.status().message().find("is not a regular file"), absl::string_view::npos);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(ErrnoStatus, MapsErrnoByMeaning) {
  EXPECT_EQ(ErrnoStatus(ENOENT, "x").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrnoStatus(EACCES, "x").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoStatus(EIO, "x").code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ErrnoStatus(EMFILE, "x").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoStatus(ENFILE, "x").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoStatus(ENOMEM, "x").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoStatus(ENAMETOOLONG, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrnoStatus(EISDIR, "x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrnoStatus(EAGAIN, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoStatus(EXDEV, "x").code(), absl::StatusCode::kInternal);
  EXPECT_EQ(ErrnoStatus(EIO, "reading f").message(), "reading f: Input/output error");
}

// Bytes of `file` at `runs`, read the plain way (one byte at a time), for comparison.
std::string Expected(const std::string& data, const StridedRuns& runs, uint64_t position, size_t n) {
  std::string out;
  for (uint64_t i = position; i < position + n; ++i) {
    out += data[runs.first_offset + (i / runs.run_bytes) * runs.stride_bytes + i % runs.run_bytes];
  }
  return out;
}

struct RunsCase {
  const char* name;
  StridedRuns runs;
  uint64_t position;
  uint64_t length;
  uint64_t max_read_calls;
};

class ReadRunsBatching : public ::testing::TestWithParam<RunsCase> {};

// Every regime of ReadRuns returns exactly the runs' bytes, from any position, with few system
// calls: before batching, run_bytes 1 cost one pread per byte (issue 9).
TEST_P(ReadRunsBatching, ExactBytesWithFewSystemCalls) {
  const RunsCase& c = GetParam();
  TempDir dir;
  std::string data(8 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 2654435761u) >> 11);
  WriteFileOrDie(dir.File("f"), data);
  auto file = ReadOnlyFile::Open(dir.File("f"));
  ASSERT_TRUE(file.ok());
  std::string out(c.length, '\0');
  ASSERT_TRUE(
      file->ReadRuns(c.runs, c.position, absl::MakeSpan(reinterpret_cast<uint8_t*>(out.data()), out.size()))
          .ok());
  EXPECT_TRUE(out == Expected(data, c.runs, c.position, c.length)) << "bytes differ";
  EXPECT_LE(file->read_calls(), c.max_read_calls);
}

INSTANTIATE_TEST_SUITE_P(
    All, ReadRunsBatching,
    ::testing::Values(
        // 1 MiB of 1-byte runs, dense: one read of each 1 MiB window of the span, then a gather.
        RunsCase{"OneByteRunsGathered", {3, 1, 2, 1 << 20}, 0, 1 << 20, 3},
        RunsCase{"TinyRunsFromTheMiddle", {100, 3, 7, 200000}, 1001, 300000, 3},
        // 8 KiB runs every 12 KiB: preadv, runs straight into the output, 512 per call.
        RunsCase{"MediumRunsVectored", {5, 8192, 12288, 600}, 4000, 600 * 8192 - 9000, 2},
        // 64 KiB runs: one pread each.
        RunsCase{"LargeRunsOnePreadEach", {0, 65536, 131072, 40}, 0, 40 * 65536, 40},
        RunsCase{"Contiguous", {7, 4096, 4096, 1000}, 10, 4096 * 999, 1}),
    [](const ::testing::TestParamInfo<RunsCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace metaload
