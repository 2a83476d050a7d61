// Every FailedPrecondition a rank, metactl or the Python package can meet, and the kind its
// maker gave it (util/error_kind.h): so the exit code metactl ends with and the exception the
// package raises. FailedPrecondition alone ("fix the state first") is no longer "a tensor on
// meta": only what says so is. The daemon's own ("not the coordinator", "has no coordinator")
// are plain FailedPrecondition: tests/proto/status_test.cc carries one across gRPC.
#include <gtest/gtest.h>

#include <cerrno>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "planner/doctor/match.h"
#include "planner/format/safetensors.h"
#include "planner/format/safetensors_writer.h"
#include "tests/test_support.h"
#include "util/error_kind.h"
#include "util/fs/file_io.h"
#include "util/fs/file_stamp.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// The exit code and the Python exception a status gives, as one string to compare.
std::string Outcome(const absl::Status& status) {
  return absl::StrCat(ExitCodeOf(KindOf(status)), " ", PythonExceptionOf(KindOf(status)));
}

// A register or plan refused before anything is read is bad input (exit 2): 3 is for what a
// verification found (issue 37: a refused register exited 3).
TEST(ErrorKinds, TensorsThatWouldStayOnMetaAreRefusedAsBadInputAndVerificationIsExit3) {
  MatchReport report;
  report.missing = {"score.weight"};
  const absl::Status refused = MatchToStatus(report, "m");
  ASSERT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_EQ(Outcome(refused), "2 BadInputError");
  EXPECT_EQ(Outcome(Annotate(refused, "registering m")), "2 BadInputError") << "context keeps the kind";
  EXPECT_EQ(Outcome(MetaTensorError("x")), "3 MetaTensorError");
}

TEST(ErrorKinds, APathThatIsNotARegularFileIsBadInput) {
  testing::TempDir dir;
  absl::StatusOr<ReadOnlyFile> folder = ReadOnlyFile::Open(dir.path());
  ASSERT_EQ(folder.status().code(), absl::StatusCode::kFailedPrecondition) << folder.status();
  EXPECT_EQ(Outcome(folder.status()), "2 BadInputError");
  for (int err : {EISDIR, ENXIO, ENODEV}) {
    const absl::Status status = ErrnoStatus(err, "opening x");
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << err;
    EXPECT_EQ(Outcome(status), "2 BadInputError") << err;
  }
}

TEST(ErrorKinds, ACheckpointOfTheOtherLayoutInTheFolderIsBadInput) {
  testing::TempDir dir;
  testing::WriteFileOrDie(dir.File("model.safetensors.index.json"), "{}");
  const std::vector<TensorToWrite> one{
      {"w", DType::kU8, {2}, [](absl::Span<uint8_t> out) { out[0] = out[1] = 1; }}};
  const absl::Status refused = WriteShardedCheckpoint(dir.path(), one, 1 << 20);
  ASSERT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_EQ(Outcome(refused), "2 BadInputError");
}

TEST(ErrorKinds, StateToFixIsAFailure) {
  const absl::Status changed =
      CheckUnchangedSinceRegistration("/m/model.safetensors", FileStamp{10, 2}, FileStamp{10, 1});
  ASSERT_EQ(changed.code(), absl::StatusCode::kFailedPrecondition) << changed;
  EXPECT_EQ(Outcome(changed), "1 LoadError") << "register again";
  EXPECT_EQ(Outcome(absl::FailedPreconditionError("node-b is not the coordinator")), "1 LoadError");
}

// The one table (include/metaload/errors.h), row by row as docs/cli.md prints it: a kind added,
// renumbered or renamed in one place and not the other fails here.
TEST(ErrorKinds, TheTableIsTheOneDocsCliMdPrints) {
  std::set<std::string> in_code;
  for (ErrorKind kind : kAllErrorKinds) {
    in_code.insert(absl::StrCat(ExitCodeOf(kind), " ", InfoOf(kind).name, " ", PythonExceptionOf(kind)));
  }
  EXPECT_EQ(in_code, (std::set<std::string>{"2 bad_input BadInputError", "3 meta_tensor MetaTensorError",
                                            "1 failure LoadError", "1 busy BusyError"}));
  std::ifstream cli(std::string(METALOAD_SOURCE_DIR) + "/docs/cli.md");
  ASSERT_TRUE(cli) << "docs/cli.md";
  // | 2 | `bad_input` | `BadInputError` | ...
  const std::regex row(R"(^\| ([0-9]) \| `([a-z_]+)` \| `([A-Za-z]+)` \|)");
  std::set<std::string> in_docs;
  for (std::string line; std::getline(cli, line);) {
    std::smatch m;
    if (std::regex_search(line, m, row))
      in_docs.insert(absl::StrCat(m[1].str(), " ", m[2].str(), " ", m[3].str()));
  }
  EXPECT_EQ(in_docs, in_code) << "docs/cli.md's \"Exit codes\" table";
}

// The cases the issue named, each as its maker now makes it (before: every one of them but the
// last exited 2, as if the user's input were wrong).
TEST(ErrorKinds, StorageFailuresAreFailuresNotBadInput) {
  EXPECT_EQ(Outcome(ErrnoStatus(EIO, "reading /m/model.safetensors")), "1 LoadError") << "a disk I/O error";
  EXPECT_EQ(Outcome(ErrnoStatus(ENOSPC, "writing state_dir/x")), "1 LoadError") << "a full disk is not busy";
  EXPECT_EQ(Outcome(ErrnoStatus(EMFILE, "opening x")), "1 LoadError");
  EXPECT_EQ(Outcome(absl::DataLossError("GetPlan from a: stream ended after 10 bytes")), "1 LoadError")
      << "a stream that ended early";
  EXPECT_EQ(Outcome(ErrnoStatus(EAGAIN, "reading x")), "1 BusyError");
}

TEST(ErrorKinds, AFullQueueIsBusyAcrossGrpcToo) {
  const absl::Status full = absl::ResourceExhaustedError("node-a: the io queue holds 64 jobs; try again");
  EXPECT_EQ(Outcome(full), "1 BusyError");
  EXPECT_TRUE(IsBusyError(full));
  EXPECT_EQ(Outcome(TryAgainError("node-a is starting; try again")), "1 BusyError");
  EXPECT_EQ(Outcome(Annotate(TryAgainError("x"), "GetPlan from a")), "1 BusyError")
      << "context keeps the kind";
  EXPECT_EQ(Outcome(TooLargeError("the request is 9 bytes, over max_request_size (8 bytes)")),
            "2 BadInputError");
}

TEST(ErrorKinds, ACorruptHeaderIsTheUsersFileToFix) {
  // A 1,000-byte file whose 8-byte length prefix says 100 header bytes, of which the read got
  // only 1: truncated (DataLoss), and the file to fix.
  std::string prefix("\x64\0\0\0\0\0\0\0{", 9);
  absl::StatusOr<SafetensorsFile> parsed = ParseSafetensorsHeader(prefix, 1000, "model.safetensors");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss) << parsed.status();
  EXPECT_EQ(Outcome(parsed.status()), "2 BadInputError") << parsed.status();
}

TEST(ErrorKinds, CodesSayTheirKindWithoutAMark) {
  EXPECT_EQ(Outcome(absl::InvalidArgumentError("x")), "2 BadInputError");
  EXPECT_EQ(Outcome(absl::NotFoundError("x")), "2 BadInputError");
  EXPECT_EQ(Outcome(absl::DataLossError("x")), "1 LoadError");
  EXPECT_EQ(Outcome(absl::ResourceExhaustedError("x")), "1 BusyError");
  EXPECT_EQ(Outcome(absl::UnavailableError("x")), "1 LoadError");
  EXPECT_EQ(Outcome(absl::DeadlineExceededError("x")), "1 LoadError");
  EXPECT_EQ(Outcome(WithErrorKind(absl::UnavailableError("x"), ErrorKind::kBadInput)), "2 BadInputError");
  absl::Status unknown = absl::FailedPreconditionError("x");
  unknown.SetPayload(kErrorKindUrl, absl::Cord("a kind of a later version"));
  EXPECT_EQ(Outcome(unknown), "1 LoadError") << "a mark this build does not know: the code's kind";
}

}  // namespace
}  // namespace metaload
