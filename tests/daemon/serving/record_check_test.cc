// A record a daemon did not build is checked against the file's own safetensors header before
// a byte is served (issue 23): the header's tensors as registration reads them pass; a `.env`
// beside the weights, the header's own bytes, a range across two tensors, and a tensor named
// with another dtype, shape or offsets are refused, naming the model and the file, never its
// bytes. The verdict is kept while the file keeps its stamp and taken again when it changes.
#include "daemon/serving/record_check.h"

#include <gtest/gtest.h>

#include <fstream>

#include "absl/strings/match.h"
#include "daemon/serving/served_ranges.h"
#include "planner/format/safetensors.h"
#include "planner/format/safetensors_writer.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

TensorToWrite Filled(const std::string& name, DType dtype, std::vector<int64_t> shape) {
  return TensorToWrite{name, dtype, std::move(shape), [](absl::Span<uint8_t> out) {
                         for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i);
                       }};
}

class RecordCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        WriteSafetensors(path_, {Filled("a", DType::kF32, {2, 3}), Filled("b", DType::kU8, {5})}).ok());
    absl::StatusOr<SafetensorsFile> header = ReadSafetensorsFile(path_, "model.safetensors");
    ASSERT_TRUE(header.ok()) << header.status();
    held_ = header->tensors;  // a at [8+N, 8+N+24), b right after
    std::ofstream(env_) << "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI\n";
  }

  absl::Status Check(const std::string& path, std::vector<TensorLayout> claimed) {
    absl::StatusOr<std::unique_ptr<RandomAccessFile>> file = FileSystem::Default()->Open(path);
    if (!file.ok()) return file.status();
    std::vector<const TensorLayout*> pointers;
    for (const TensorLayout& t : claimed) pointers.push_back(&t);
    return CheckFileHoldsClaims(**file, "evil", pointers);
  }

  static TensorLayout U8(const std::string& name, uint64_t begin, uint64_t end) {
    TensorLayout t;
    t.name = name;
    t.dtype = DType::kU8;
    t.shape = {static_cast<int64_t>(end - begin)};
    t.file = "x";
    t.begin_offset = begin;
    t.end_offset = end;
    return t;
  }

  void ExpectRefused(const absl::Status& status, const std::string& path, const std::string& why) {
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
    EXPECT_EQ(status.message(), absl::StrCat("ReadRange: \"", path,
                                             "\" does not hold what the record of model "
                                             "\"evil\" says: ",
                                             why));
    EXPECT_EQ(std::string(status.message()).find("wJalr"), std::string::npos) << status;
  }

  testing::TempDir dir_;
  const std::string path_ = dir_.File("model.safetensors");
  const std::string env_ = dir_.File(".env");
  std::vector<TensorLayout> held_;
};

TEST_F(RecordCheckTest, TheTensorsTheHeaderHoldsPass) {
  EXPECT_TRUE(Check(path_, held_).ok());
  EXPECT_TRUE(Check(path_, {held_[1]}).ok()) << "a record may name some of a file's tensors";
  EXPECT_TRUE(Check(path_, {}).ok());
}

TEST_F(RecordCheckTest, AFileThatIsNotSafetensorsIsRefusedWithoutItsBytes) {
  absl::Status s = Check(env_, {U8("secret", 0, 34)});
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), absl::StrCat("ReadRange: \"", env_,
                                                         "\" does not hold what the record of model \"evil\" "
                                                         "says: it is not a safetensors file (")))
      << s;
  EXPECT_EQ(std::string(s.message()).find("wJalr"), std::string::npos) << s;
  EXPECT_EQ(std::string(s.message()).find("AWS"), std::string::npos) << s;
}

TEST_F(RecordCheckTest, TheHeadersOwnBytesAreRefused) {
  const uint64_t data_begin = held_[0].begin_offset;
  ExpectRefused(Check(path_, {U8("header", 0, data_begin)}), path_,
                "tensor \"header\" is not in its safetensors header");
  // Under a real tensor's name, the header's range is still not that tensor's.
  TensorLayout as_a = U8("a", 0, data_begin);
  ExpectRefused(Check(path_, {as_a}), path_, "tensor \"a\" has dtype U8, the file's header says F32");
}

TEST_F(RecordCheckTest, ARangeAcrossTwoTensorsIsRefused) {
  const uint64_t middle_of_a = held_[0].begin_offset + 12, middle_of_b = held_[1].begin_offset + 2;
  ExpectRefused(Check(path_, {U8("span", middle_of_a, middle_of_b)}), path_,
                "tensor \"span\" is not in its safetensors header");
  TensorLayout b = held_[1];
  b.begin_offset -= 2;
  b.end_offset -= 2;
  ExpectRefused(
      Check(path_, {b}), path_,
      absl::StrCat("tensor \"b\" has bytes [", b.begin_offset, ", ", b.end_offset,
                   "), the file's header says [", held_[1].begin_offset, ", ", held_[1].end_offset, ")"));
}

TEST_F(RecordCheckTest, AnotherDtypeOrShapeThanTheHeadersIsRefused) {
  TensorLayout a = held_[0];
  a.shape = {3, 2};
  ExpectRefused(Check(path_, {a}), path_, "tensor \"a\" has shape [3, 2], the file's header says [2, 3]");
  a = held_[0];
  a.dtype = DType::kI32;
  ExpectRefused(Check(path_, {held_[1], a}), path_, "tensor \"a\" has dtype I32, the file's header says F32");
}

TEST_F(RecordCheckTest, ServedRangesCheckOpenedOnlyForRecordsItWasSent) {
  Checkpoint claims;
  claims.dir = dir_.path();
  claims.files = {".env"};
  TensorLayout secret = U8("secret", 0, 34);
  secret.file = ".env";
  claims.tensors = {secret};
  auto file = FileSystem::Default()->Open(env_);
  ASSERT_TRUE(file.ok());
  // Its own registration's record is believed (the daemon read the header itself)...
  EXPECT_TRUE(ServedRanges("evil", claims).CheckOpened(env_, **file).ok());
  // ... a record sent to it is not.
  ServedRanges sent("evil", std::make_shared<const Checkpoint>(claims), "PublishModel from test");
  EXPECT_TRUE(sent.Check(env_, StridedRuns{0, 6, 6, 1}).ok()) << "the record's own ranges allow it";
  EXPECT_EQ(sent.CheckOpened(env_, **file).code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(RecordCheckTest, AVerdictIsTakenAgainWhenTheFileChanges) {
  Checkpoint claims;
  claims.dir = dir_.path();
  claims.files = {"model.safetensors"};
  claims.tensors = held_;
  for (TensorLayout& t : claims.tensors) t.file = "model.safetensors";
  ServedRanges sent("m", std::make_shared<const Checkpoint>(claims), "etcd key \"/metaload/models/m\"");
  auto before = FileSystem::Default()->Open(path_);
  ASSERT_TRUE(before.ok());
  EXPECT_TRUE(sent.CheckOpened(path_, **before).ok());
  // Rewritten with another layout (another size, so another stamp whatever the clock's grain).
  ASSERT_TRUE(WriteSafetensors(path_, {Filled("a", DType::kF32, {2, 4}), Filled("b", DType::kU8, {5})}).ok());
  auto after = FileSystem::Default()->Open(path_);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(sent.CheckOpened(path_, **after).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(sent.CheckOpened(path_, **before).ok()) << "the old file, as checked, is still that file";
}

}  // namespace
}  // namespace metaload
