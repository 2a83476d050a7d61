// Every header, index and config.json a checkpoint reader takes goes through the Storage it is
// given: the same folder read from disk and from the in-memory back end ("mem://") gives the
// same checkpoint and skeleton, a missing shard names its mem:// location, and a fault file
// system reaches header reads (before: they bypassed the seam with their own open/pread).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/format/checkpoint.h"
#include "planner/format/safetensors_writer.h"
#include "planner/skeleton/hf/checkpoint_skeleton.h"
#include "planner/skeleton/skeleton.h"
#include "tests/faults/fault_file_system.h"
#include "tests/test_support.h"
#include "util/error_kind.h"
#include "util/fs/location.h"
#include "util/fs/memory_file_system.h"

namespace metaload {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

MemoryFileSystem& Memory() { return RegisteredMemoryFileSystem(); }

// Every file of folder `dir` put under `location`.
void CopyIntoMemory(const std::string& dir, const std::string& location) {
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    Memory().Put(location + "/" + entry.path().filename().string(),
                 testing::ReadFileOrDie(entry.path().string()));
  }
}

// Every tensor's name, file and byte range, and every file's size, as one string to compare.
std::string Layout(const Checkpoint& c) {
  std::string out = absl::StrJoin(c.files, ",");
  for (const TensorLayout& t : c.tensors)
    absl::StrAppend(&out, "|", t.name, "@", t.file, ":", t.begin_offset, "-", t.end_offset);
  for (const FileStamp& stamp : c.stamps) absl::StrAppend(&out, "|", stamp.size_bytes, "B");
  for (const auto& [key, value] : c.metadata) absl::StrAppend(&out, "|", key, "=", value);
  return out;
}

void ExpectSameLayout(const Checkpoint& a, const Checkpoint& b) { EXPECT_EQ(Layout(a), Layout(b)); }

TEST(CheckpointStorage, AFolderTransformersWroteReadsTheSameFromMemory) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  const std::string dir = fixtures + "/safetensors/st_gpt2-1L-16d_tiny-llm-cicd_f32";
  CopyIntoMemory(dir, "mem://fixtures/gpt2-tiny");
  absl::StatusOr<Checkpoint> on_disk = OpenCheckpoint(dir);
  absl::StatusOr<Checkpoint> in_memory = OpenCheckpoint("mem://fixtures/gpt2-tiny/");
  ASSERT_TRUE(on_disk.ok()) << on_disk.status();
  ASSERT_TRUE(in_memory.ok()) << in_memory.status();
  EXPECT_EQ(in_memory->dir, "mem://fixtures/gpt2-tiny");
  ExpectSameLayout(*on_disk, *in_memory);

  // The skeleton from the folder's config.json, read through the same storage.
  absl::StatusOr<CheckpointSkeleton> disk_skeleton = SkeletonForCheckpoint(*on_disk, "gpt2");
  absl::StatusOr<CheckpointSkeleton> memory_skeleton = SkeletonForCheckpoint(*in_memory, "gpt2");
  ASSERT_TRUE(disk_skeleton.ok()) << disk_skeleton.status();
  ASSERT_TRUE(memory_skeleton.ok()) << memory_skeleton.status();
  EXPECT_EQ(memory_skeleton->origin, SkeletonOrigin::kHfConfig);
  EXPECT_EQ(memory_skeleton->config_path, "mem://fixtures/gpt2-tiny/config.json");
  EXPECT_EQ(SkeletonToJson(memory_skeleton->skeleton), SkeletonToJson(disk_skeleton->skeleton));
  EXPECT_EQ(BaseNameOf(in_memory->dir), "gpt2-tiny");
}

TEST(CheckpointStorage, AShardedCheckpointAndItsIndexFromMemory) {
  testing::TempDir dir;
  std::vector<TensorToWrite> tensors;
  for (int i = 0; i < 4; ++i) {
    tensors.push_back(
        {"layer" + std::to_string(i) + ".weight", DType::kF32, {8, 8}, [i](absl::Span<uint8_t> out) {
           for (size_t b = 0; b < out.size(); ++b) out[b] = static_cast<uint8_t>(b + i);
         }});
  }
  ASSERT_TRUE(WriteShardedCheckpoint(dir.path(), tensors, 300).ok());
  CopyIntoMemory(dir.path(), "mem://sharded/m");
  absl::StatusOr<Checkpoint> on_disk = OpenCheckpoint(dir.path());
  absl::StatusOr<Checkpoint> in_memory = OpenCheckpoint("mem://sharded/m");
  ASSERT_TRUE(on_disk.ok()) << on_disk.status();
  ASSERT_TRUE(in_memory.ok()) << in_memory.status();
  EXPECT_EQ(in_memory->files.size(), 4u);
  ExpectSameLayout(*on_disk, *in_memory);
  absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex("mem://sharded/m");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->path, "mem://sharded/m/model.safetensors.index.json");

  ASSERT_TRUE(Memory().Remove("mem://sharded/m/model-00002-of-00004.safetensors"));
  absl::StatusOr<Checkpoint> missing = OpenCheckpoint("mem://sharded/m");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(
      std::string(missing.status().message()),
      HasSubstr("names shard model-00002-of-00004.safetensors (for \"layer1.weight\" and 0 more tensors), "
                "but mem://sharded/m/model-00002-of-00004.safetensors does not exist"));
  EXPECT_EQ(OpenCheckpoint("mem://sharded/nothing").status().message(),
            "mem://sharded/nothing: no such file or folder");
}

TEST(CheckpointStorage, HeaderReadsGoThroughTheSeamFaultsCanReach) {
  testing::TempDir dir;
  std::vector<TensorToWrite> one{{"w", DType::kU8, {4}, [](absl::Span<uint8_t> out) { out[0] = 1; }}};
  ASSERT_TRUE(WriteShardedCheckpoint(dir.path(), one, 1 << 20).ok());
  FaultFileSystem faults;
  faults.Add({FileFault::kEio, "model.safetensors", 0});
  absl::StatusOr<Checkpoint> failed = OpenCheckpoint(dir.path(), Storage::On(&faults));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kDataLoss) << failed.status();
  EXPECT_EQ(ExitCodeOf(KindOf(failed.status())), 1) << "a disk that failed is no bad input";
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr("model.safetensors at 0: Input/output error"));
  EXPECT_EQ(faults.faults_injected(), 1u);
  faults.Clear();
  EXPECT_TRUE(OpenCheckpoint(dir.path(), Storage::On(&faults)).ok());
}

}  // namespace
}  // namespace metaload
