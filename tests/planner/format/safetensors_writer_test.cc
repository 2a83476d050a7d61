// WriteSafetensors: byte-compatible with the safetensors library, atomic, and strict about
// what it is given.
#include "planner/format/safetensors_writer.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/format/safetensors.h"
#include "tests/planner/format/patterned_tensor.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

using testing::FilledBytes;
using ::testing::HasSubstr;
using testing::Patterned;

TEST(SafetensorsWriterTest, HeaderMatchesTheSafetensorsLibraryByteForByte) {
  // Expected header from safetensors 0.8 `safetensors.numpy.save` of the same tensors with
  // metadata={"k": "v"}: largest dtypes first, then by name; padded with spaces to 8 bytes.
  const std::string expected =
      R"({"__metadata__":{"k":"v"},"b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
      R"("m":{"dtype":"F64","shape":[1],"data_offsets":[8,16]},)"
      R"("c":{"dtype":"F32","shape":[0,3],"data_offsets":[16,16]},)"
      R"("s":{"dtype":"F32","shape":[],"data_offsets":[16,20]},)"
      R"("z":{"dtype":"F16","shape":[3],"data_offsets":[20,26]},)"
      R"("a":{"dtype":"U8","shape":[2],"data_offsets":[26,28]},)"
      R"("bo":{"dtype":"BOOL","shape":[2],"data_offsets":[28,30]}})"
      "      ";
  testing::TempDir dir;
  const std::string path = dir.File("golden.safetensors");
  ASSERT_TRUE(WriteSafetensors(path,
                               {Patterned("z", DType::kF16, {3}), Patterned("a", DType::kU8, {2}),
                                Patterned("m", DType::kF64, {1}), Patterned("b", DType::kI64, {1}),
                                Patterned("c", DType::kF32, {0, 3}), Patterned("s", DType::kF32, {}),
                                Patterned("bo", DType::kBool, {2})},
                               {{"k", "v"}})
                  .ok());
  const std::string bytes = testing::ReadFileOrDie(path);
  ASSERT_EQ(bytes.size(), 8 + expected.size() + 30);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\xa0\x01\0\0\0\0\0\0", 8));  // 416
  EXPECT_EQ(bytes.substr(8, expected.size()), expected);
}

TEST(SafetensorsWriterTest, WrittenFileReadsBackWithItsData) {
  testing::TempDir dir;
  const std::string path = dir.File("m.safetensors");
  const std::vector<TensorToWrite> tensors = {Patterned("w", DType::kBF16, {5, 7}),
                                              Patterned("bias", DType::kF32, {7}),
                                              Patterned("empty", DType::kI32, {0})};
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(path, "m.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->metadata.empty());
  EXPECT_EQ(file->data_begin_offset % 8, 0u);
  const std::string bytes = testing::ReadFileOrDie(path);
  ASSERT_EQ(file->tensors.size(), 3u);
  for (const TensorToWrite& expected : tensors) {
    const TensorLayout* found = nullptr;
    for (const TensorLayout& t : file->tensors) found = t.name == expected.name ? &t : found;
    ASSERT_NE(found, nullptr) << expected.name;
    EXPECT_EQ(found->dtype, expected.dtype);
    EXPECT_EQ(found->shape, expected.shape);
    EXPECT_EQ(bytes.substr(found->begin_offset, found->size_bytes()),
              FilledBytes(expected, found->size_bytes()))
        << expected.name;
  }
}

TEST(SafetensorsWriterTest, NoTensorsWritesAValidEmptyFile) {
  testing::TempDir dir;
  ASSERT_TRUE(WriteSafetensors(dir.File("e.safetensors"), {}).ok());
  absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(dir.File("e.safetensors"), "e");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->tensors.empty());
}

TEST(SafetensorsWriterTest, ReplacesAnExistingFileAndLeavesNoTemporary) {
  testing::TempDir dir;
  const std::string path = dir.File("m.safetensors");
  testing::WriteFileOrDie(path, "old contents");
  ASSERT_TRUE(WriteSafetensors(path, {Patterned("x", DType::kU8, {3})}).ok());
  EXPECT_TRUE(ReadSafetensorsFile(path, "m").ok());
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(names, std::vector<std::string>{"m.safetensors"});
}

TEST(SafetensorsWriterTest, FailedWriteKeepsTheOldFile) {
  testing::TempDir dir;
  const std::string path = dir.File("m.safetensors");
  testing::WriteFileOrDie(path, "old contents");
  EXPECT_FALSE(WriteSafetensors(path, {Patterned("x", DType::kU8, {-3})}).ok());
  EXPECT_EQ(testing::ReadFileOrDie(path), "old contents");
}

TEST(SafetensorsWriterTest, DuplicateNameIsRejected) {
  testing::TempDir dir;
  absl::Status status = WriteSafetensors(dir.File("d.safetensors"),
                                         {Patterned("x", DType::kU8, {1}), Patterned("x", DType::kU8, {2})});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("tensor \"x\" given twice"));
}

TEST(SafetensorsWriterTest, ReservedOrEmptyNameIsRejected) {
  testing::TempDir dir;
  EXPECT_THAT(
      std::string(WriteSafetensors(dir.File("r"), {Patterned("__metadata__", DType::kU8, {1})}).message()),
      HasSubstr("invalid tensor name \"__metadata__\""));
  EXPECT_THAT(std::string(WriteSafetensors(dir.File("r"), {Patterned("", DType::kU8, {1})}).message()),
              HasSubstr("invalid tensor name \"\""));
}

TEST(SafetensorsWriterTest, NegativeDimIsRejected) {
  testing::TempDir dir;
  absl::Status status = WriteSafetensors(dir.File("n.safetensors"), {Patterned("x", DType::kU8, {2, -1})});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("negative dimension in shape [2, -1]"));
}

TEST(SafetensorsWriterTest, OverflowingShapeIsRejected) {
  testing::TempDir dir;
  absl::Status status =
      WriteSafetensors(dir.File("o.safetensors"), {Patterned("x", DType::kF32, {int64_t{1} << 62})});
  EXPECT_THAT(std::string(status.message()), HasSubstr("overflows 64 bits"));
}

TEST(SafetensorsWriterTest, MissingFillIsRejected) {
  testing::TempDir dir;
  TensorToWrite t = Patterned("x", DType::kU8, {1});
  t.fill = nullptr;
  EXPECT_THAT(std::string(WriteSafetensors(dir.File("f.safetensors"), {t}).message()),
              HasSubstr("tensor \"x\" has no fill"));
}

TEST(SafetensorsWriterTest, InvalidUtf8NameIsRejected) {
  testing::TempDir dir;
  absl::Status status = WriteSafetensors(dir.File("u.safetensors"), {Patterned("bad\xff", DType::kU8, {1})});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("must be valid UTF-8"));
}

TEST(SafetensorsWriterTest, MissingFolderIsNotFound) {
  testing::TempDir dir;
  absl::Status status = WriteSafetensors(dir.File("no/such/m.safetensors"), {});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr("cannot create"));
}

}  // namespace
}  // namespace metaload
