// OpenCheckpoint, ReadCheckpointIndex and WriteShardedCheckpoint, on checkpoints written here.
#include "planner/format/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/format/safetensors_writer.h"
#include "tests/planner/format/patterned_tensor.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

namespace fs = std::filesystem;
using testing::FilledBytes;
using ::testing::HasSubstr;
using testing::Patterned;

// 10 tensors of 40..400 bytes: with a 500-byte shard limit they need several shards.
std::vector<TensorToWrite> SmallModel() {
  std::vector<TensorToWrite> tensors;
  for (int i = 0; i < 10; ++i) {
    tensors.push_back(Patterned("layers." + std::to_string(i) + ".weight", i % 2 ? DType::kBF16 : DType::kF32,
                                {10, i + 1}));
  }
  tensors.push_back(Patterned("big", DType::kF32, {200}));  // 800 bytes: a shard of its own
  tensors.push_back(Patterned("norm", DType::kF16, {0}));
  return tensors;
}

void WriteOrDie(const std::string& path, const std::vector<TensorToWrite>& tensors) {
  absl::Status status = WriteSafetensors(path, tensors);
  ASSERT_TRUE(status.ok()) << status;
}

void WriteIndex(const std::string& dir, const std::map<std::string, std::string>& weight_map) {
  nlohmann::json index = {{"metadata", {{"total_size", 1}}}, {"weight_map", weight_map}};
  testing::WriteFileOrDie(dir + "/model.safetensors.index.json", index.dump());
}

absl::Status OpenError(const std::string& path) {
  absl::StatusOr<Checkpoint> ckpt = OpenCheckpoint(path);
  return ckpt.ok() ? absl::OkStatus() : ckpt.status();
}

// --- round trip ---------------------------------------------------------------------------------

TEST(CheckpointTest, ShardedWriteOpensWithSameTensorsAndBytes) {
  testing::TempDir dir;
  const std::vector<TensorToWrite> tensors = SmallModel();
  ASSERT_TRUE(WriteShardedCheckpoint(dir.path(), tensors, 500).ok());

  absl::StatusOr<Checkpoint> ckpt = OpenCheckpoint(dir.path() + "/./");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->dir, fs::absolute(dir.path()).lexically_normal().string());
  ASSERT_GT(ckpt->files.size(), 2u);
  EXPECT_EQ(ckpt->files.front(), absl::StrFormat("model-00001-of-%05d.safetensors", ckpt->files.size()));
  EXPECT_TRUE(std::is_sorted(ckpt->files.begin(), ckpt->files.end()));
  EXPECT_EQ(ckpt->metadata.at("format"), "pt");
  ASSERT_EQ(ckpt->tensors.size(), tensors.size());

  uint64_t expected_total_bytes = 0;
  std::map<std::string, std::string> file_contents;
  for (const std::string& file : ckpt->files)
    file_contents[file] = testing::ReadFileOrDie(ckpt->dir + "/" + file);
  for (const TensorToWrite& t : tensors) {
    const TensorLayout* layout = ckpt->Find(t.name);
    ASSERT_NE(layout, nullptr) << t.name;
    EXPECT_EQ(layout->dtype, t.dtype);
    EXPECT_EQ(layout->shape, t.shape);
    const std::string& contents = file_contents.at(layout->file);
    EXPECT_EQ(contents.substr(layout->begin_offset, layout->size_bytes()),
              FilledBytes(t, layout->size_bytes()))
        << t.name;
    expected_total_bytes += layout->size_bytes();
  }
  EXPECT_EQ(ckpt->total_size_bytes(), expected_total_bytes);
  // A tensor larger than the limit gets a shard of its own.
  for (const TensorLayout& t : ckpt->tensors) {
    if (t.name != "big") {
      EXPECT_NE(t.file, ckpt->Find("big")->file) << t.name;
    }
  }
  for (size_t i = 1; i < ckpt->tensors.size(); ++i) {
    const TensorLayout& a = ckpt->tensors[i - 1];
    const TensorLayout& b = ckpt->tensors[i];
    EXPECT_TRUE(a.file < b.file || (a.file == b.file && a.begin_offset <= b.begin_offset));
  }

  absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex(dir.path());
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->total_size_bytes, static_cast<int64_t>(expected_total_bytes));
  EXPECT_EQ(index->weight_map.size(), tensors.size());
}

// Registration records these stamps (daemon/registration/registrar.cc) instead of stating the
// files again after the headers were read, which needed every header read twice.
TEST(CheckpointTest, EachFileCarriesTheStampOfTheDescriptorItsHeaderWasReadFrom) {
  testing::TempDir dir;
  ASSERT_TRUE(WriteShardedCheckpoint(dir.path(), SmallModel(), 500).ok());
  absl::StatusOr<Checkpoint> ckpt = OpenCheckpoint(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ASSERT_EQ(ckpt->stamps.size(), ckpt->files.size());
  for (size_t i = 0; i < ckpt->files.size(); ++i) {
    struct stat st;
    ASSERT_EQ(::stat((ckpt->dir + "/" + ckpt->files[i]).c_str(), &st), 0);
    EXPECT_EQ(ckpt->stamps[i].size_bytes, static_cast<uint64_t>(st.st_size)) << ckpt->files[i];
    EXPECT_EQ(ckpt->stamps[i].mtime_ns,
              static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec)
        << ckpt->files[i];
  }
  // A shard rewritten after its header was read keeps the stamp of the read: the loader's
  // check against the registered stamp then refuses the file as it is now.
  const std::string shard = ckpt->dir + "/" + ckpt->files[0];
  struct stat st;
  ASSERT_EQ(::stat(shard.c_str(), &st), 0);
  struct timespec later[2] = {st.st_atim, st.st_mtim};
  later[1].tv_sec += 5;
  ASSERT_EQ(::utimensat(AT_FDCWD, shard.c_str(), later, 0), 0);
  ASSERT_EQ(::stat(shard.c_str(), &st), 0);
  const FileStamp now{static_cast<uint64_t>(st.st_size),
                      static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  EXPECT_THAT(CheckUnchangedSinceRegistration(shard, now, ckpt->stamps[0]).message(),
              HasSubstr("changed since it was registered"));

  absl::StatusOr<Checkpoint> single = OpenCheckpoint(shard);
  ASSERT_TRUE(single.ok()) << single.status();
  ASSERT_EQ(single->stamps.size(), 1u);
  EXPECT_EQ(single->stamps[0].mtime_ns, now.mtime_ns);
}

TEST(CheckpointTest, ShardsFollowTheGivenOrderAndTheLimit) {
  testing::TempDir dir;
  // 300 + 300 > 500 so each gets its own shard; 100 joins the second.
  ASSERT_TRUE(WriteShardedCheckpoint(dir.path(),
                                     {Patterned("a", DType::kU8, {300}), Patterned("b", DType::kU8, {300}),
                                      Patterned("c", DType::kU8, {100}), Patterned("d", DType::kU8, {700})},
                                     500)
                  .ok());
  absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex(dir.path() + "/model.safetensors.index.json");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->weight_map, (std::map<std::string, std::string>{
                                   {"a", "model-00001-of-00003.safetensors"},
                                   {"b", "model-00002-of-00003.safetensors"},
                                   {"c", "model-00002-of-00003.safetensors"},
                                   {"d", "model-00003-of-00003.safetensors"},
                               }));
  EXPECT_EQ(index->total_size_bytes, 1400);
}

TEST(CheckpointTest, OneShardWritesModelSafetensorsWithoutIndex) {
  testing::TempDir dir;
  ASSERT_TRUE(WriteShardedCheckpoint(dir.path(), SmallModel(), uint64_t{1} << 30).ok());
  EXPECT_TRUE(fs::exists(dir.File("model.safetensors")));
  EXPECT_FALSE(fs::exists(dir.File("model.safetensors.index.json")));
  absl::StatusOr<Checkpoint> ckpt = OpenCheckpoint(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->files, std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(ckpt->tensors.size(), SmallModel().size());
}

TEST(CheckpointTest, ShardedWriteBesideASingleFileIsRefused) {
  testing::TempDir dir;
  ASSERT_TRUE(WriteShardedCheckpoint(dir.path(), SmallModel(), uint64_t{1} << 30).ok());
  absl::Status status = WriteShardedCheckpoint(dir.path(), SmallModel(), 500);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("model.safetensors already exists"));
}

TEST(CheckpointTest, ShardedWriteRejectsNamesRepeatedAcrossShards) {
  testing::TempDir dir;
  absl::Status status = WriteShardedCheckpoint(
      dir.path(), {Patterned("a", DType::kU8, {300}), Patterned("a", DType::kU8, {300})}, 500);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("tensor \"a\" given twice"));
}

// --- layouts OpenCheckpoint accepts -------------------------------------------------------------

TEST(CheckpointTest, OpensASingleSafetensorsFile) {
  testing::TempDir dir;
  WriteOrDie(dir.File("weights.safetensors"), {Patterned("x", DType::kF32, {2, 2})});
  absl::StatusOr<Checkpoint> ckpt = OpenCheckpoint(dir.File("weights.safetensors"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->dir, fs::absolute(dir.path()).lexically_normal().string());
  EXPECT_EQ(ckpt->files, std::vector<std::string>{"weights.safetensors"});
  ASSERT_NE(ckpt->Find("x"), nullptr);
  EXPECT_EQ(ckpt->Find("x")->file, "weights.safetensors");
  EXPECT_EQ(ckpt->Find("y"), nullptr);
}

TEST(CheckpointTest, OpensAFolderWithModelSafetensors) {
  testing::TempDir dir;
  WriteOrDie(dir.File("model.safetensors"),
             {Patterned("x", DType::kF32, {2}), Patterned("y", DType::kI8, {3})});
  absl::StatusOr<Checkpoint> ckpt = OpenCheckpoint(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->tensors.size(), 2u);
  EXPECT_EQ(ckpt->total_size_bytes(), 11u);
}

TEST(CheckpointTest, OpensTheIndexFileItself) {
  testing::TempDir dir;
  ASSERT_TRUE(WriteShardedCheckpoint(dir.path(), SmallModel(), 500).ok());
  absl::StatusOr<Checkpoint> ckpt = OpenCheckpoint(dir.File("model.safetensors.index.json"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->tensors.size(), SmallModel().size());
}

TEST(CheckpointTest, MissingPathIsNotFound) {
  testing::TempDir dir;
  absl::Status status = OpenError(dir.File("absent"));
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr("absent: no such file or folder"));
}

TEST(CheckpointTest, FolderWithoutCheckpointListsWhatWasLookedFor) {
  testing::TempDir dir;
  absl::Status status = OpenError(dir.path());
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("looked for model.safetensors and model.safetensors.index.json"));
}

TEST(CheckpointTest, OtherFileIsRejected) {
  testing::TempDir dir;
  testing::WriteFileOrDie(dir.File("config.json"), "{}");
  EXPECT_THAT(std::string(OpenError(dir.File("config.json")).message()), HasSubstr("not a checkpoint"));
}

TEST(CheckpointTest, CorruptShardErrorNamesIt) {
  testing::TempDir dir;
  testing::WriteFileOrDie(dir.File("model.safetensors"), "short");
  absl::Status status = OpenError(dir.path());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("model.safetensors: file is shorter than 8 bytes"));
}

// --- index and shards disagreeing ---------------------------------------------------------------

TEST(CheckpointTest, IndexNamingAMissingShardIsNotFound) {
  testing::TempDir dir;
  WriteOrDie(dir.File("s1.safetensors"), {Patterned("a", DType::kU8, {1})});
  WriteIndex(dir.path(), {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}});
  absl::Status status = OpenError(dir.path());
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr("names shard s2.safetensors (for \"b\""));
  EXPECT_THAT(std::string(status.message()), HasSubstr(dir.File("s2.safetensors") + " does not exist"));
}

TEST(CheckpointTest, IndexNamingATensorItsShardLacksIsRejected) {
  testing::TempDir dir;
  WriteOrDie(dir.File("s1.safetensors"), {Patterned("a", DType::kU8, {1})});
  WriteIndex(dir.path(), {{"a", "s1.safetensors"}, {"ghost", "s1.safetensors"}});
  absl::Status status = OpenError(dir.path());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(status.message()),
      HasSubstr("model.safetensors.index.json maps tensor \"ghost\" to s1.safetensors, but that shard "
                "does not contain it"));
}

TEST(CheckpointTest, TensorInShardButNotInIndexIsRejected) {
  testing::TempDir dir;
  WriteOrDie(dir.File("s1.safetensors"),
             {Patterned("a", DType::kU8, {1}), Patterned("extra", DType::kU8, {2})});
  WriteIndex(dir.path(), {{"a", "s1.safetensors"}});
  absl::Status status = OpenError(dir.path());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("tensor \"extra\" is in shard s1.safetensors but not in the weight_map of"));
}

TEST(CheckpointTest, TensorInTheWrongShardNamesBoth) {
  testing::TempDir dir;
  WriteOrDie(dir.File("s1.safetensors"), {Patterned("a", DType::kU8, {1}), Patterned("b", DType::kU8, {1})});
  WriteOrDie(dir.File("s2.safetensors"), {Patterned("c", DType::kU8, {1})});
  WriteIndex(dir.path(), {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}, {"c", "s2.safetensors"}});
  absl::Status status = OpenError(dir.path());
  EXPECT_THAT(std::string(status.message()), HasSubstr("tensor \"b\" is in shard s1.safetensors but"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("maps it to s2.safetensors"));
}

TEST(CheckpointTest, TensorInTwoShardsNamesBoth) {
  testing::TempDir dir;
  WriteOrDie(dir.File("s1.safetensors"), {Patterned("a", DType::kU8, {1})});
  WriteOrDie(dir.File("s2.safetensors"), {Patterned("a", DType::kU8, {1}), Patterned("b", DType::kU8, {1})});
  WriteIndex(dir.path(), {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}});
  absl::Status status = OpenError(dir.path());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("tensor \"a\" is in two shards: s1.safetensors and s2.safetensors"));
}

TEST(CheckpointTest, ShardNameOutsideTheFolderIsRejected) {
  testing::TempDir dir;
  WriteIndex(dir.path(), {{"a", "../elsewhere.safetensors"}});
  EXPECT_THAT(std::string(OpenError(dir.path()).message()),
              HasSubstr("weight_map[\"a\"] = \"../elsewhere.safetensors\" is not a file name inside"));
  WriteIndex(dir.path(), {{"a", "/etc/passwd"}});
  EXPECT_THAT(std::string(OpenError(dir.path()).message()), HasSubstr("is not a file name inside"));
}

// --- ReadCheckpointIndex validation -------------------------------------------------------------

absl::Status IndexError(const std::string& text) {
  testing::TempDir dir;
  testing::WriteFileOrDie(dir.File("model.safetensors.index.json"), text);
  absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex(dir.path());
  return index.ok() ? absl::OkStatus() : index.status();
}

// The text form (what fuzz/checkpoint_index_fuzz.cc drives) reads the same as the file, and its
// errors start with the path it is given.
// --- ties the files record (save_model's metadata) -------------------------------------------

using Ties = std::map<std::string, std::string>;

TEST(SavedTiesTest, SaveModelMetadataNamesTheDroppedDuplicate) {
  testing::TempDir dir;
  // As safetensors' save_model writes a module whose head.weight is embed.weight.
  ASSERT_TRUE(WriteSafetensors(dir.File("model.safetensors"),
                               {Patterned("embed.weight", DType::kF32, {4, 2})},
                               {{"head.weight", "embed.weight"}, {"format", "pt"}})
                  .ok());
  absl::StatusOr<Checkpoint> ckpt = OpenCheckpoint(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->saved_ties, (Ties{{"head.weight", "embed.weight"}}));
}

TEST(SavedTiesTest, EntriesThatAreNoDroppedDuplicateAreNotTies) {
  testing::TempDir dir;
  const std::map<std::string, std::string> hostile = {
      {"format", "pt"},                 // ordinary metadata
      {"ghost.weight", "nothing"},      // names no stored tensor
      {"b.weight", "a.weight"},         // b is stored: a stored tensor is never redirected
      {"chain.weight", "link.weight"},  // a chain: link is no stored tensor,
      {"link.weight", "a.weight"},      // but link itself is a tie
      {"c.weight", "d.weight"},         // a cycle of names nobody stores
      {"d.weight", "c.weight"},
  };
  ASSERT_TRUE(WriteSafetensors(
                  dir.File("model.safetensors"),
                  {Patterned("a.weight", DType::kF32, {2}), Patterned("b.weight", DType::kF16, {3})}, hostile)
                  .ok());
  absl::StatusOr<Checkpoint> ckpt = OpenCheckpoint(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->saved_ties, (Ties{{"link.weight", "a.weight"}}));
}

TEST(SavedTiesTest, ShardedTiesComeFromTheIndexAndShardsAndConflictsAreDropped) {
  testing::TempDir dir;
  ASSERT_TRUE(WriteSafetensors(dir.File("a.safetensors"), {Patterned("x", DType::kF32, {2})},
                               {{"format", "pt"}, {"twice", "x"}})
                  .ok());
  ASSERT_TRUE(
      WriteSafetensors(dir.File("b.safetensors"), {Patterned("y", DType::kF32, {2})}, {{"twice", "y"}}).ok());
  // As huggingface_hub's save_torch_state_dict writes a sharded one: the ties in the index.
  nlohmann::json index = {{"metadata", {{"total_size", 16}, {"head", "x"}, {"note", 3}}},
                          {"weight_map", {{"x", "a.safetensors"}, {"y", "b.safetensors"}}}};
  testing::WriteFileOrDie(dir.File("model.safetensors.index.json"), index.dump());
  absl::StatusOr<Checkpoint> ckpt = OpenCheckpoint(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->saved_ties, (Ties{{"head", "x"}}));  // "twice": x in one shard, y in the other
}

TEST(CheckpointIndexTest, ParseFromTextMatchesTheFileAndNamesThePath) {
  absl::StatusOr<CheckpointIndex> index = ParseCheckpointIndex(
      R"({"weight_map": {"a": "s.safetensors"}, "metadata": {"total_size": 8}})", "x/i.json");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->path, "x/i.json");
  EXPECT_EQ(index->weight_map.at("a"), "s.safetensors");
  EXPECT_EQ(index->total_size_bytes, 8);
  absl::StatusOr<CheckpointIndex> bad = ParseCheckpointIndex("[]", "x/i.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              ::testing::StartsWith("x/i.json: index must be a JSON object"));
}

TEST(CheckpointIndexTest, TotalSizeMayBeNumberStringOrIntegralFloatOrAbsent) {
  testing::TempDir dir;
  const std::string path = dir.File("model.safetensors.index.json");
  for (const auto& [metadata, expected] :
       std::vector<std::pair<std::string, int64_t>>{{R"({"total_size": 123})", 123},
                                                    {R"({"total_size": "456"})", 456},
                                                    {R"({"total_size": 16060522496.0})", 16060522496},
                                                    {R"({"mergekit_version": "0.0.4.4"})", -1}}) {
    testing::WriteFileOrDie(path, R"({"weight_map": {"a": "s.safetensors"}, "metadata": )" + metadata + "}");
    absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex(path);
    ASSERT_TRUE(index.ok()) << index.status();
    EXPECT_EQ(index->total_size_bytes, expected) << metadata;
  }
  testing::WriteFileOrDie(path, R"({"weight_map": {}})");
  absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex(path);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->total_size_bytes, -1);
}

TEST(CheckpointIndexTest, BadTotalSizeIsRejected) {
  for (const std::string bad : {"-5", "1.5", "\"12x\"", "\"\"", "true", "null", "1e300"}) {
    absl::Status status = IndexError(R"({"weight_map": {}, "metadata": {"total_size": )" + bad + "}}");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("metadata.total_size must be a non-negative integer"))
        << bad;
  }
}

TEST(CheckpointIndexTest, NonObjectIndexIsRejected) {
  EXPECT_THAT(std::string(IndexError("[]").message()), HasSubstr("index must be a JSON object, got array"));
}

TEST(CheckpointIndexTest, InvalidJsonIsRejected) {
  absl::Status status = IndexError("{\"weight_map\": ");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("model.safetensors.index.json: invalid JSON"));
}

TEST(CheckpointIndexTest, MissingWeightMapIsRejected) {
  EXPECT_THAT(std::string(IndexError(R"({"metadata": {}})").message()), HasSubstr("missing \"weight_map\""));
}

TEST(CheckpointIndexTest, NonObjectWeightMapIsRejected) {
  EXPECT_THAT(std::string(IndexError(R"({"weight_map": []})").message()),
              HasSubstr("\"weight_map\" must be an object, got array"));
}

TEST(CheckpointIndexTest, NonStringShardIsRejected) {
  EXPECT_THAT(std::string(IndexError(R"({"weight_map": {"a": 1}})").message()),
              HasSubstr("weight_map[\"a\"] must be a file name string, got an integer"));
}

TEST(CheckpointIndexTest, DuplicateTensorInWeightMapIsRejected) {
  EXPECT_THAT(std::string(IndexError(R"({"weight_map": {"a": "s1", "a": "s2"}})").message()),
              HasSubstr("duplicate key \"a\" in the object under \"weight_map\""));
}

TEST(CheckpointIndexTest, NonObjectMetadataIsRejected) {
  EXPECT_THAT(std::string(IndexError(R"({"weight_map": {}, "metadata": 3})").message()),
              HasSubstr("\"metadata\" must be an object, got number"));
}

TEST(CheckpointIndexTest, FolderWithoutIndexListsWhatWasLookedFor) {
  testing::TempDir dir;
  absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex(dir.path());
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(index.status().message()),
              HasSubstr("looked for model.safetensors.index.json and pytorch_model.bin.index.json"));
}

TEST(CheckpointIndexTest, MissingIndexFileIsNotFound) {
  testing::TempDir dir;
  absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex(dir.File("x.index.json"));
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace metaload
