// A record a daemon did not build is checked against the file's own safetensors header before
// a byte is served (issue 23): the header's tensors as registration reads them pass; a `.env`
// beside the weights, the header's own bytes, a range across two tensors, and a tensor named
// with another dtype, shape or offsets are refused, naming the model and the file, never its
// bytes, and telling the client none of the header's facts: what differs is for the log only
// (issue 35). The verdict is kept while the file keeps its whole stamp and taken again when it
// changes, or when another file is renamed over it with its size and mtime. A file this daemon
// stamped when registering it is served only while it is that very file.
#include "daemon/serving/record_check.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <map>

#include "absl/strings/match.h"
#include "daemon/serving/served_ranges.h"
#include "planner/format/safetensors.h"
#include "planner/format/safetensors_writer.h"
#include "tests/test_support.h"
#include "util/fs/file_stamp.h"

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

  // A record of `tensors` (the header's own by default), all placed in model.safetensors.
  Checkpoint Claims(std::vector<TensorLayout> tensors) const {
    Checkpoint claims;
    claims.dir = dir_.path();
    claims.files = {"model.safetensors"};
    claims.tensors = std::move(tensors);
    for (TensorLayout& t : claims.tensors) t.file = "model.safetensors";
    return claims;
  }
  Checkpoint Claims() const { return Claims(held_); }

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

// The client that sent a forged record learns only that the file does not hold it; before,
// each refusal told one more field of the header ("the file's header says F32", "says [2, 3]",
// "says [136, 160)", "not a safetensors file (...)"). The log line says what differs.
TEST_F(RecordCheckTest, ARefusedRecordIsAnsweredWithNoneOfTheHeadersFacts) {
  TensorLayout dtype = held_[0], shape = held_[0], offsets = held_[1];
  dtype.dtype = DType::kI32;
  shape.shape = {3, 2};
  offsets.begin_offset -= 2;
  offsets.end_offset -= 2;
  const std::map<std::string, std::pair<std::vector<TensorLayout>, std::string>> forged = {
      {"dtype", {{dtype}, "tensor \"a\" has dtype I32, the file's header says F32"}},
      {"shape", {{shape}, "tensor \"a\" has shape [3, 2], the file's header says [2, 3]"}},
      {"offsets", {{offsets}, absl::StrCat("the file's header says [", held_[1].begin_offset, ", ")}},
      {"header",
       {{U8("header", 0, held_[0].begin_offset)}, "tensor \"header\" is not in its safetensors header"}},
  };
  auto file = FileSystem::Default()->Open(path_);
  ASSERT_TRUE(file.ok()) << file.status();
  for (const auto& [name, claim] : forged) {
    ServedRanges sent("evil", std::make_shared<const Checkpoint>(Claims(claim.first)),
                      "PublishModel from test");
    ::testing::internal::CaptureStderr();
    absl::Status s = sent.CheckOpened(path_, **file);
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << name << ": " << s;
    EXPECT_EQ(std::string(s.message()),
              absl::StrCat("ReadRange: \"", path_, "\" does not hold what the record of model \"evil\" says"))
        << name;
    for (const char* fact : {"F32", "[2, 3]", "header says", "safetensors header"}) {
      EXPECT_EQ(std::string(s.message()).find(fact), std::string::npos) << name << " tells " << fact;
    }
    EXPECT_NE(log.find(claim.second), std::string::npos)
        << name << ": the log must say what differs: " << log;
    EXPECT_NE(log.find("record sent by PublishModel from test"), std::string::npos) << log;
  }
  // Nor is the answer for a file that is no safetensors file at all any other.
  Checkpoint secret;
  secret.dir = dir_.path();
  secret.files = {".env"};
  secret.tensors = {U8("secret", 0, 34)};
  secret.tensors[0].file = ".env";
  auto env = FileSystem::Default()->Open(env_);
  ASSERT_TRUE(env.ok()) << env.status();
  ::testing::internal::CaptureStderr();
  absl::Status s = ServedRanges("evil", std::make_shared<const Checkpoint>(secret), "PublishModel from test")
                       .CheckOpened(env_, **env);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("it is not a safetensors file ("),
            std::string::npos);
  EXPECT_EQ(std::string(s.message()),
            absl::StrCat("ReadRange: \"", env_, "\" does not hold what the record of model \"evil\" says"));
}

// What a local user who can write the checkpoint folder does: another file of the same size,
// its mtime set to the registered file's, renamed over it.
void RenameOverKeepingSizeAndMtime(const std::string& path, const std::string& other_bytes) {
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  ASSERT_EQ(other_bytes.size(), static_cast<size_t>(st.st_size));
  const std::string other = path + ".other";
  testing::WriteFileOrDie(other, other_bytes);
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, other.c_str(), times, 0), 0);
  ASSERT_EQ(::rename(other.c_str(), path.c_str()), 0);
}

TEST_F(RecordCheckTest, AVerdictIsNotReusedForAFileRenamedOverItWithItsSizeAndMtime) {
  ServedRanges sent("m", std::make_shared<const Checkpoint>(Claims()), "PublishModel from test");
  auto before = FileSystem::Default()->Open(path_);
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE(sent.CheckOpened(path_, **before).ok());
  const std::string size_of_it(before->get()->size_bytes(), 'x');
  RenameOverKeepingSizeAndMtime(path_, size_of_it);
  auto after = FileSystem::Default()->Open(path_);
  ASSERT_TRUE(after.ok());
  ASSERT_EQ((*after)->size_bytes(), (*before)->size_bytes());
  ASSERT_EQ((*after)->mtime_ns(), (*before)->mtime_ns());
  // Before: OK, the verdict kept for a file of that size and mtime.
  absl::Status s = sent.CheckOpened(path_, **after);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_EQ(std::string(s.message()),
            absl::StrCat("ReadRange: \"", path_, "\" does not hold what the record of model \"m\" says"));
}

TEST_F(RecordCheckTest, AFileThisDaemonStampedIsServedOnlyWhileItIsThatVeryFile) {
  const Checkpoint own = Claims();
  auto registered = FileSystem::Default()->Open(path_);
  ASSERT_TRUE(registered.ok());
  const FileStamp stamp = StampOf(**registered);
  const ServedRanges served("m", own, HostStamps{{"model.safetensors", stamp}});
  const ServedRanges sent("m", std::make_shared<const Checkpoint>(own), "coordinator c (GetLayout)",
                          HostStamps{{"model.safetensors", stamp}});
  EXPECT_TRUE(served.CheckOpened(path_, **registered).ok());
  EXPECT_TRUE(sent.CheckOpened(path_, **registered).ok());

  // A fine-tune of another user: the same header, other tensor bytes, the same size and mtime.
  std::string other = testing::ReadFileOrDie(path_);
  for (size_t i = held_[0].begin_offset; i < other.size(); ++i) other[i] ^= 0x5A;
  RenameOverKeepingSizeAndMtime(path_, other);
  auto swapped = FileSystem::Default()->Open(path_);
  ASSERT_TRUE(swapped.ok());
  const FileStamp now = StampOf(**swapped);
  // The ctime too, unless both files were written within one tick of the file system's clock.
  const std::string ctime =
      now.ctime_ns == stamp.ctime_ns
          ? ""
          : absl::StrCat("; ctime ", FormatMtime(now.ctime_ns), ", registered ", FormatMtime(stamp.ctime_ns));
  const std::string expected =
      absl::StrCat(path_, " changed since it was registered: inode ", now.inode, ", registered ", stamp.inode,
                   ctime, " (size ", stamp.size_bytes, " bytes, as registered; mtime ",
                   FormatMtime(stamp.mtime_ns), ", as registered); run `metactl register --refresh m`");
  // Before: OK for both (the header holds what the record says), and the other file's bytes.
  for (const ServedRanges* ranges : {&served, &sent}) {
    absl::Status s = ranges->CheckOpened(path_, **swapped);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_EQ(std::string(s.message()), expected);
  }
  EXPECT_TRUE(served.CheckOpened(path_, **registered).ok()) << "the descriptor opened before is that file";
  // Another daemon's record (no stamps of this host) is checked by the header alone.
  EXPECT_TRUE(ServedRanges("m", std::make_shared<const Checkpoint>(own), "etcd key")
                  .CheckOpened(path_, **swapped)
                  .ok());
}

TEST_F(RecordCheckTest, AVerdictIsTakenAgainWhenTheFileChanges) {
  ServedRanges sent("m", std::make_shared<const Checkpoint>(Claims()), "etcd key \"/metaload/models/m\"");
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
