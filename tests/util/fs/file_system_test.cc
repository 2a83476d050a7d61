// The file seam: the POSIX FileSystem reads as ReadOnlyFile does, and the fault-injecting one
// (tests/faults/fault_file_system.h) fails, shrinks, corrupts and slows reads exactly where it
// is told to, with the errors a real failing file gives.
#include "util/fs/file_system.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "absl/time/clock.h"
#include "tests/faults/fault_file_system.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

using ::metaload::testing::TempDir;
using ::metaload::testing::WriteFileOrDie;

// 64 bytes: byte i is i.
std::string Counting() {
  std::string bytes(64, '\0');
  for (int i = 0; i < 64; ++i) bytes[i] = static_cast<char>(i);
  return bytes;
}

std::string Read(const RandomAccessFile& file, uint64_t offset, size_t n, absl::Status* status) {
  std::string out(n, '\0');
  *status = file.ReadAt(offset, absl::MakeSpan(reinterpret_cast<uint8_t*>(out.data()), n));
  return out;
}

TEST(PosixFileSystem, OpensAndReadsLikeReadOnlyFile) {
  TempDir dir;
  WriteFileOrDie(dir.File("a.bin"), Counting());
  auto file = FileSystem::Default()->Open(dir.File("a.bin"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->size_bytes(), 64u);
  absl::Status status;
  EXPECT_EQ(Read(**file, 10, 4, &status), Counting().substr(10, 4));
  EXPECT_TRUE(status.ok()) << status;
  Read(**file, 62, 4, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(FileSystem::Default()->Open(dir.File("none")).status().code(), absl::StatusCode::kNotFound);
}

TEST(PosixFileSystem, OpenUnderRootsRefusesAFileOutsideTheRoots) {
  TempDir dir;
  ::mkdir(dir.File("root").c_str(), 0755);
  WriteFileOrDie(dir.File("root/a.bin"), Counting());
  WriteFileOrDie(dir.File("secret"), "x");
  EXPECT_TRUE(FileSystem::Default()->OpenUnderRoots(dir.File("root/a.bin"), {dir.File("root")}, false).ok());
  EXPECT_EQ(
      FileSystem::Default()->OpenUnderRoots(dir.File("secret"), {dir.File("root")}, false).status().code(),
      absl::StatusCode::kPermissionDenied);
}

class FaultFileSystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFileOrDie(dir_.File("a.bin"), Counting());
    WriteFileOrDie(dir_.File("b.bin"), Counting());
  }
  std::unique_ptr<RandomAccessFile> Open(const std::string& name) {
    auto file = fs_.Open(dir_.File(name));
    EXPECT_TRUE(file.ok()) << file.status();
    return file.ok() ? *std::move(file) : nullptr;
  }
  TempDir dir_;
  FaultFileSystem fs_;
};

TEST_F(FaultFileSystemTest, EioFailsReadsThatReachItsByteAndOnlyThose) {
  fs_.Add({.kind = FileFault::kEio, .path_suffix = "a.bin", .at_byte = 32});
  auto a = Open("a.bin");
  absl::Status status;
  EXPECT_EQ(Read(*a, 0, 32, &status), Counting().substr(0, 32));
  EXPECT_TRUE(status.ok()) << status;
  Read(*a, 30, 4, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(status.message(), "reading " + dir_.File("a.bin") + " at 32: Input/output error");
  Read(*Open("b.bin"), 30, 4, &status);  // another file
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(fs_.faults_injected(), 1u);
}

TEST_F(FaultFileSystemTest, ShrinkEndsTheFileWhereItSaysAsATruncationWould) {
  fs_.Add({.kind = FileFault::kShrink, .at_byte = 20});
  auto a = Open("a.bin");
  absl::Status status;
  std::string got = Read(*a, 16, 8, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(status.message(),
            dir_.File("a.bin") + " ended at 20 while reading [16, 24): the file was truncated");
  EXPECT_EQ(got.substr(0, 4), Counting().substr(16, 4));  // what was there is read
}

TEST_F(FaultFileSystemTest, CorruptFlipsOneByteOnceWhenTold) {
  fs_.Add({.kind = FileFault::kCorrupt, .at_byte = 5, .times = 1});
  auto a = Open("a.bin");
  absl::Status status;
  std::string first = Read(*a, 0, 8, &status);
  ASSERT_TRUE(status.ok()) << status;
  std::string expected = Counting().substr(0, 8);
  expected[5] = static_cast<char>(5 ^ 0xFF);
  EXPECT_EQ(first, expected);
  EXPECT_EQ(Read(*a, 0, 8, &status), Counting().substr(0, 8));  // spent
}

TEST_F(FaultFileSystemTest, StridedReadsMeetTheFaultsOfEachRun) {
  // Runs of 4 bytes every 16: bytes 4..7, 20..23, 36..39; byte 21 corrupted, 36 onwards failing.
  fs_.Add({.kind = FileFault::kCorrupt, .at_byte = 21});
  auto a = Open("a.bin");
  const StridedRuns runs{.first_offset = 4, .run_bytes = 4, .stride_bytes = 16, .run_count = 3};
  std::string out(8, '\0');
  ASSERT_TRUE(a->ReadRuns(runs, 0, absl::MakeSpan(reinterpret_cast<uint8_t*>(out.data()), 8)).ok());
  std::string expected = Counting().substr(4, 4) + Counting().substr(20, 4);
  expected[5] = static_cast<char>(21 ^ 0xFF);
  EXPECT_EQ(out, expected);
  fs_.Add({.kind = FileFault::kEio, .at_byte = 36});
  std::string all(12, '\0');
  EXPECT_EQ(a->ReadRuns(runs, 0, absl::MakeSpan(reinterpret_cast<uint8_t*>(all.data()), 12)).code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(FaultFileSystemTest, SlowDelaysEveryRead) {
  fs_.Add({.kind = FileFault::kSlow, .delay = absl::Milliseconds(50)});
  auto a = Open("a.bin");
  absl::Status status;
  const absl::Time start = absl::Now();
  Read(*a, 0, 8, &status);
  Read(*a, 8, 8, &status);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
}

}  // namespace
}  // namespace metaload
