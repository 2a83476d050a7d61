// Every FailedPrecondition a rank, metactl or the Python package can meet, and the kind its
// maker gave it (util/error_kind.h): so the exit code metactl ends with and the exception the
// package raises. FailedPrecondition alone ("fix the state first") is no longer "a tensor on
// meta": only what says so is. The daemon's own ("not the coordinator", "has no coordinator")
// are plain FailedPrecondition: tests/proto/status_test.cc carries one across gRPC.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "planner/doctor/match.h"
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

TEST(ErrorKinds, TensorsThatWouldStayOnMetaExit3AsMetaTensorError) {
  MatchReport report;
  report.missing = {"score.weight"};
  const absl::Status refused = MatchToStatus(report, "m");
  ASSERT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_EQ(Outcome(refused), "3 MetaTensorError");
  EXPECT_EQ(Outcome(Annotate(refused, "registering m")), "3 MetaTensorError") << "context keeps the kind";
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

TEST(ErrorKinds, CodesSayTheirKindWithoutAMark) {
  EXPECT_EQ(Outcome(absl::InvalidArgumentError("x")), "2 BadInputError");
  EXPECT_EQ(Outcome(absl::NotFoundError("x")), "2 BadInputError");
  EXPECT_EQ(Outcome(absl::DataLossError("x")), "2 BadInputError");
  EXPECT_EQ(Outcome(absl::UnavailableError("x")), "1 LoadError");
  EXPECT_EQ(Outcome(absl::DeadlineExceededError("x")), "1 LoadError");
  EXPECT_EQ(Outcome(WithErrorKind(absl::UnavailableError("x"), ErrorKind::kBadInput)), "2 BadInputError");
  absl::Status unknown = absl::FailedPreconditionError("x");
  unknown.SetPayload(kErrorKindUrl, absl::Cord("a kind of a later version"));
  EXPECT_EQ(Outcome(unknown), "1 LoadError") << "a mark this build does not know: the code's kind";
}

}  // namespace
}  // namespace metaload
