// ParseSafetensorsHeader / ReadSafetensorsFile: one test per distinct validation error (code
// and message), plus the shapes of valid files real writers produce.
#include "planner/format/safetensors.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_support.h"
#include "util/error_kind.h"

namespace metaload {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kName[] = "t.safetensors";

std::string LengthPrefix(uint64_t n) {
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return prefix;
}

// A whole file: length prefix, `header`, then `data_size_bytes` bytes of data.
std::string MakeFile(const std::string& header, uint64_t data_size_bytes) {
  return LengthPrefix(header.size()) + header + std::string(data_size_bytes, '\x5a');
}

absl::StatusOr<SafetensorsFile> Parse(const std::string& bytes) {
  return ParseSafetensorsHeader(bytes, bytes.size(), kName);
}

// Expects `bytes` to fail with `code` and a message holding `substring`, starting with the name.
void ExpectError(const std::string& bytes, absl::StatusCode code, const std::string& substring) {
  absl::StatusOr<SafetensorsFile> file = Parse(bytes);
  ASSERT_FALSE(file.ok()) << "parsed although it should fail with: " << substring;
  EXPECT_EQ(file.status().code(), code) << file.status();
  EXPECT_THAT(std::string(file.status().message()), StartsWith(std::string(kName) + ": "));
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(substring));
}

void ExpectInvalid(const std::string& header, uint64_t data_size_bytes, const std::string& substring) {
  ExpectError(MakeFile(header, data_size_bytes), absl::StatusCode::kInvalidArgument, substring);
}

// --- 1-3: length prefix, size cap, bounds ---------------------------------------------------

TEST(SafetensorsHeaderTest, FileShorterThanLengthPrefixIsRejected) {
  ExpectError(std::string(5, '\0'), absl::StatusCode::kInvalidArgument, "file is shorter than 8 bytes");
}

TEST(SafetensorsHeaderTest, HeaderLengthAboveLimitIsRejectedBeforeReading) {
  ExpectError(LengthPrefix(kMaxSafetensorsHeaderBytes + 1) + "{}", absl::StatusCode::kInvalidArgument,
              "the header length field exceeds the 100000000-byte limit: not a safetensors file");
}

TEST(SafetensorsHeaderTest, HeaderLengthPastEndOfFileIsRejected) {
  ExpectError(
      LengthPrefix(100) + "{}", absl::StatusCode::kInvalidArgument,
      "the header length field exceeds the file size (10 bytes): truncated, or not a safetensors file");
}

TEST(SafetensorsHeaderTest, HugeHeaderLengthDoesNotOverflow) {
  ExpectError(LengthPrefix(UINT64_MAX) + "{}", absl::StatusCode::kInvalidArgument, "exceeds the");
}

TEST(SafetensorsHeaderTest, PrefixShorterThanHeaderIsDataLoss) {
  const std::string bytes = MakeFile("{}", 0);
  absl::StatusOr<SafetensorsFile> file = ParseSafetensorsHeader(bytes.substr(0, 9), bytes.size(), kName);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(file.status().message()),
              HasSubstr("truncated: the header needs more than the 9 bytes that could be read"));
}

TEST(SafetensorsHeaderTest, PrefixShorterThanLengthPrefixIsDataLoss) {
  const std::string bytes = MakeFile("{}", 0);
  absl::StatusOr<SafetensorsFile> file = ParseSafetensorsHeader(bytes.substr(0, 3), bytes.size(), kName);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("fewer than the 8-byte length prefix"));
}

// --- 4: UTF-8, JSON, object -------------------------------------------------------------------

TEST(SafetensorsHeaderTest, InvalidUtf8IsRejected) {
  ExpectInvalid("{\"a\xff\":1}", 0, "header is not valid UTF-8");
}

TEST(SafetensorsHeaderTest, OverlongUtf8IsRejected) {
  ExpectInvalid("{\"\xc0\xaf\":1}", 0, "header is not valid UTF-8");
}

TEST(SafetensorsHeaderTest, InvalidJsonIsRejected) {
  ExpectInvalid("{\"a\": {", 0,
                "header is not valid JSON: invalid JSON at byte 8: syntax error while parsing object key - "
                "unexpected end of input");
}

TEST(SafetensorsHeaderTest, NumberTooLargeForADoubleIsRejected) {
  ExpectInvalid(R"({"a":{"dtype":"U8","shape":[1e400],"data_offsets":[0,0]}})", 0,
                "header is not valid JSON: invalid JSON at byte 33: a number is out of range");
}

TEST(SafetensorsHeaderTest, DeepNestingIsRejectedWithoutRecursing) {
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  ExpectInvalid(R"({"a":{"dtype":"U8","shape":)" + deep + R"(,"data_offsets":[0,0]}})", 0,
                "header is not valid JSON: invalid JSON: nested deeper than 64 levels");
}

TEST(SafetensorsHeaderTest, NonObjectHeaderIsRejected) {
  ExpectInvalid("[1, 2]", 0, "header is not a JSON object (got array)");
}

TEST(SafetensorsHeaderTest, DuplicateTensorNameIsRejected) {
  ExpectInvalid(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                2, "duplicate key \"a\" in the top-level object");
}

TEST(SafetensorsHeaderTest, DuplicateFieldInsideEntryIsRejected) {
  ExpectInvalid(R"({"a":{"dtype":"U8","dtype":"F32","shape":[1],"data_offsets":[0,1]}})", 1,
                "duplicate key \"dtype\" in the object under \"a\"");
}

// --- 5: entries ---------------------------------------------------------------------------------

TEST(SafetensorsHeaderTest, EntryThatIsNotAnObjectIsRejected) {
  ExpectInvalid(R"({"a":[1]})", 0, "tensor \"a\": entry must be an object, got array");
}

TEST(SafetensorsHeaderTest, MissingDtypeIsRejected) {
  ExpectInvalid(R"({"a":{"shape":[1],"data_offsets":[0,1]}})", 1, "tensor \"a\": missing \"dtype\"");
}

TEST(SafetensorsHeaderTest, NonStringDtypeIsRejected) {
  ExpectInvalid(R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4, "\"dtype\" must be a string");
}

TEST(SafetensorsHeaderTest, UnknownDtypeIsRejected) {
  ExpectInvalid(R"({"a":{"dtype":"F7","shape":[1],"data_offsets":[0,1]}})", 1,
                "tensor \"a\": unknown dtype \"F7\"");
}

TEST(SafetensorsHeaderTest, MissingShapeIsRejected) {
  ExpectInvalid(R"({"a":{"dtype":"U8","data_offsets":[0,1]}})", 1, "tensor \"a\": missing \"shape\"");
}

TEST(SafetensorsHeaderTest, NonArrayShapeIsRejected) {
  ExpectInvalid(R"({"a":{"dtype":"U8","shape":3,"data_offsets":[0,3]}})", 3, "\"shape\" must be an array");
}

TEST(SafetensorsHeaderTest, NegativeDimIsRejected) {
  ExpectInvalid(R"({"a":{"dtype":"U8","shape":[2,-1],"data_offsets":[0,0]}})", 0,
                "\"shape\" must hold non-negative integers, got a negative integer");
}

TEST(SafetensorsHeaderTest, FractionalDimIsRejected) {
  ExpectInvalid(R"({"a":{"dtype":"U8","shape":[2.0],"data_offsets":[0,2]}})", 2,
                "\"shape\" must hold non-negative integers, got a floating-point number");
}

TEST(SafetensorsHeaderTest, HugeBadValueIsDescribedShortNotQuoted) {
  absl::StatusOr<SafetensorsFile> file = Parse(MakeFile(
      R"({"a":{"dtype":"U8","shape":[")" + std::string(100'000, 'x') + R"("],"data_offsets":[0,0]}})", 0));
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()),
              HasSubstr("must hold non-negative integers, got a string of 100000 bytes"));
  EXPECT_THAT(std::string(file.status().message()), Not(HasSubstr("xxx")));
  EXPECT_LT(file.status().message().size(), 200u);
}

TEST(SafetensorsHeaderTest, DimAboveInt64IsRejected) {
  ExpectInvalid(R"({"a":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,0]}})", 0,
                "must hold non-negative integers, got an integer of 2^63 or more");
}

TEST(SafetensorsHeaderTest, MissingDataOffsetsIsRejected) {
  ExpectInvalid(R"({"a":{"dtype":"U8","shape":[1]}})", 1, "tensor \"a\": missing \"data_offsets\"");
}

TEST(SafetensorsHeaderTest, DataOffsetsNotTwoIntegersIsRejected) {
  ExpectInvalid(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", 2,
                "\"data_offsets\" must be two non-negative integers, got an array of 3 elements");
  ExpectInvalid(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", 1,
                "\"data_offsets\" must be two non-negative integers");
}

TEST(SafetensorsHeaderTest, DataOffsetsEndBeforeBeginIsRejected) {
  ExpectInvalid(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}})", 4,
                "\"data_offsets\" end 2 is before begin 4");
}

// --- 6: sizes, with checked arithmetic ----------------------------------------------------------

TEST(SafetensorsHeaderTest, SizeMismatchIsRejected) {
  ExpectInvalid(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20,
                "tensor \"a\": size mismatch: shape [2, 3] of F32 needs 24 bytes but data_offsets span 20");
}

TEST(SafetensorsHeaderTest, ElementCountOverflowIsRejected) {
  ExpectInvalid(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0,
                "element count of shape [4294967296, 4294967296] overflows 64 bits");
}

TEST(SafetensorsHeaderTest, ByteSizeOverflowIsRejected) {
  // 2^62 elements fit in 64 bits; 2^62 * 4 bytes does not.
  ExpectInvalid(R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0,
                "byte size of shape [4611686018427387904] overflows 64 bits");
}

// --- 7: contiguity and coverage -----------------------------------------------------------------

TEST(SafetensorsHeaderTest, FirstTensorNotAtZeroIsRejected) {
  ExpectInvalid(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", 4,
                "data is not contiguous: first tensor \"a\" begins at 2, not 0");
}

TEST(SafetensorsHeaderTest, GapBetweenTensorsIsRejected) {
  ExpectInvalid(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                R"("b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}})",
                5, "data is not contiguous: tensor \"b\" begins at 3 but \"a\" ends at 2 (gap)");
}

TEST(SafetensorsHeaderTest, OverlappingTensorsAreRejected) {
  ExpectInvalid(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                R"("b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
                4, "tensor \"b\" begins at 2 but \"a\" ends at 4 (overlap)");
}

TEST(SafetensorsHeaderTest, TensorPastEndOfDataIsRejected) {
  ExpectInvalid(
      R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", 6,
      "data does not cover the file: tensor \"a\" ends at data offset 8, past the 6-byte data region");
}

TEST(SafetensorsHeaderTest, ExtraTrailingBytesAreRejected) {
  ExpectInvalid(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 5,
                "data does not cover the file: 3 extra trailing bytes after the last tensor");
}

TEST(SafetensorsHeaderTest, DataWithoutTensorsIsRejected) {
  ExpectInvalid("{}", 1, "1 extra trailing bytes");
}

// --- __metadata__ -------------------------------------------------------------------------------

TEST(SafetensorsHeaderTest, MetadataThatIsNotAnObjectIsRejected) {
  ExpectInvalid(R"({"__metadata__":"pt"})", 0, "__metadata__ must be an object of strings, got string");
}

TEST(SafetensorsHeaderTest, NonStringMetadataValueIsRejected) {
  ExpectInvalid(R"({"__metadata__":{"format":"pt","step":3}})", 0,
                "__metadata__ value for \"step\" must be a string, got number");
}

// --- valid files --------------------------------------------------------------------------------

TEST(SafetensorsHeaderTest, EmptyHeaderHasNoTensors) {
  absl::StatusOr<SafetensorsFile> file = Parse(MakeFile("{}", 0));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->tensors.empty());
  EXPECT_TRUE(file->metadata.empty());
  EXPECT_EQ(file->data_begin_offset, 10u);
  EXPECT_EQ(file->file_size_bytes, 10u);
}

TEST(SafetensorsHeaderTest, TensorsAreSortedByOffsetWithAbsoluteOffsets) {
  const std::string header = R"({"__metadata__":{"format":"pt","b":"x"},)"
                             R"("z":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
                             R"("a":{"dtype":"F32","shape":[],"data_offsets":[12,16]}})"
                             "      ";  // padding, as writers add
  absl::StatusOr<SafetensorsFile> file = Parse(MakeFile(header, 16));
  ASSERT_TRUE(file.ok()) << file.status();
  const uint64_t data_begin = 8 + header.size();
  EXPECT_EQ(file->data_begin_offset, data_begin);
  ASSERT_EQ(file->tensors.size(), 2u);
  const TensorLayout& z = file->tensors[0];
  EXPECT_EQ(z.name, "z");
  EXPECT_EQ(z.dtype, DType::kBF16);
  EXPECT_EQ(z.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(z.file, kName);
  EXPECT_EQ(z.begin_offset, data_begin);
  EXPECT_EQ(z.end_offset, data_begin + 12);
  const TensorLayout& scalar = file->tensors[1];
  EXPECT_EQ(scalar.name, "a");
  EXPECT_TRUE(scalar.shape.empty());
  EXPECT_EQ(scalar.size_bytes(), 4u);
  EXPECT_EQ(file->metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"b", "x"}}));
}

TEST(SafetensorsHeaderTest, ZeroSizedTensorsMayShareAnOffset) {
  const std::string header = R"({"e2":{"dtype":"F32","shape":[0,4],"data_offsets":[4,4]},)"
                             R"("w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                             R"("e1":{"dtype":"I64","shape":[3,0],"data_offsets":[4,4]},)"
                             R"("e0":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})";
  absl::StatusOr<SafetensorsFile> file = Parse(MakeFile(header, 4));
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<std::string> names;
  for (const TensorLayout& t : file->tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"e0", "w", "e1", "e2"}));
}

TEST(SafetensorsHeaderTest, OnlyZeroSizedTensorsAndNoData) {
  absl::StatusOr<SafetensorsFile> file =
      Parse(MakeFile(R"({"e":{"dtype":"F16","shape":[0],"data_offsets":[0,0]}})", 0));
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors.size(), 1u);
  EXPECT_EQ(file->tensors[0].size_bytes(), 0u);
}

TEST(SafetensorsHeaderTest, UnknownEntryFieldsAreIgnoredLikeTheReferenceLibrary) {
  absl::StatusOr<SafetensorsFile> file =
      Parse(MakeFile(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"note":"x"}})", 1));
  ASSERT_TRUE(file.ok()) << file.status();
}

// --- ReadSafetensorsFile ------------------------------------------------------------------------

TEST(ReadSafetensorsFileTest, ReadsHeaderFromDisk) {
  testing::TempDir dir;
  const std::string path = dir.File("m.safetensors");
  testing::WriteFileOrDie(path, MakeFile(R"({"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", 8));
  absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(path, "m.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors.size(), 1u);
  EXPECT_EQ(file->tensors[0].file, "m.safetensors");
  EXPECT_EQ(file->file_size_bytes, file->tensors[0].end_offset);
}

TEST(ReadSafetensorsFileTest, ErrorsNameTheFullPath) {
  testing::TempDir dir;
  const std::string path = dir.File("bad.safetensors");
  testing::WriteFileOrDie(path, MakeFile("[]", 0));
  absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(path, "bad.safetensors");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(file.status().message()), StartsWith(path + ": header is not a JSON object"));
}

TEST(ReadSafetensorsFileTest, HeaderPastEndOfShortFileIsRejected) {
  testing::TempDir dir;
  const std::string path = dir.File("short.safetensors");
  testing::WriteFileOrDie(path, LengthPrefix(1000) + "{}");
  absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(path, "short.safetensors");
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()),
              HasSubstr("the header length field exceeds the file size (10 bytes)"));
}

TEST(ReadSafetensorsFileTest, MissingFileIsNotFound) {
  testing::TempDir dir;
  const std::string path = dir.File("absent.safetensors");
  absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(path, "absent.safetensors");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  // The reason once, worded as every file the storage opens (util/fs/file_io.h).
  EXPECT_EQ(std::string(file.status().message()), "cannot open " + path + ": No such file or directory");
}

// Root reads any file whatever its mode (CI runs as root): there the read runs in a child that
// became `nobody` first, and says by its exit code whether the refusal was the right one.
TEST(ReadSafetensorsFileTest, UnreadableFileIsPermissionDenied) {
  testing::TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);  // only the file's own mode refuses
  const std::string path = dir.File("locked.safetensors");
  testing::WriteFileOrDie(path, MakeFile("{}", 0));
  ASSERT_EQ(::chmod(path.c_str(), 0), 0);
  auto refused_as_it_should = [&] {
    absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(path, "locked.safetensors");
    return !file.ok() && file.status().code() == absl::StatusCode::kPermissionDenied &&
           std::string(file.status().message()).find(path) != std::string::npos;
  };
  if (::geteuid() != 0) {
    EXPECT_TRUE(refused_as_it_should());
    return;
  }
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    constexpr uid_t kNobody = 65534;
    if (::setresgid(kNobody, kNobody, kNobody) != 0 || ::setresuid(kNobody, kNobody, kNobody) != 0)
      ::_exit(2);
    ::_exit(refused_as_it_should() ? 0 : 1);
  }
  int wait_status = 0;
  ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
  ASSERT_TRUE(WIFEXITED(wait_status));
  EXPECT_EQ(WEXITSTATUS(wait_status), 0)
      << "1: not refused as PermissionDenied naming the path; 2: setresuid";
}

TEST(ReadSafetensorsFileTest, FolderIsRejected) {
  testing::TempDir dir;
  absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(dir.path(), "x");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(KindOf(file.status()), ErrorKind::kBadInput) << "the path to fix: exit 2";
  EXPECT_EQ(std::string(file.status().message()), dir.path() + " is not a regular file");
}

}  // namespace
}  // namespace metaload
