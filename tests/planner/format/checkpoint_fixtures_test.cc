// Real files written by Hugging Face tools (tests/fixtures, SOURCES names each origin) must read.
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/format/checkpoint.h"
#include "planner/format/safetensors.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> FilesEndingWith(const std::string& root, const std::string& suffix) {
  std::vector<std::string> found;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    const std::string path = entry.path().string();
    if (entry.is_regular_file() && path.size() >= suffix.size() &&
        path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
      found.push_back(path);
    }
  }
  return found;
}

TEST(SafetensorsFixturesTest, EveryFixtureFileParses) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  const std::vector<std::string> paths = FilesEndingWith(fixtures + "/safetensors", ".safetensors");
  EXPECT_GE(paths.size(), 7u);
  for (const std::string& path : paths) {
    absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(path, fs::path(path).filename().string());
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_FALSE(file->tensors.empty()) << path;
    // Contiguous and covering: validated by the parser, checked here from the outside.
    EXPECT_EQ(file->tensors.front().begin_offset, file->data_begin_offset) << path;
    EXPECT_EQ(file->tensors.back().end_offset, file->file_size_bytes) << path;
  }
}

TEST(SafetensorsFixturesTest, TinyGpt2HasItsRealLayout) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  absl::StatusOr<Checkpoint> ckpt =
      OpenCheckpoint(fixtures + "/safetensors/st_gpt2-1L-16d_tiny-llm-cicd_f32");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->files, std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(ckpt->tensors.size(), 16u);
  EXPECT_EQ(ckpt->metadata.at("format"), "pt");
  // N = 1456, so data starts at 1464; the file is 3,247,544 bytes.
  EXPECT_EQ(ckpt->total_size_bytes(), 3247544u - 1464u);
  const TensorLayout* wte = ckpt->Find("transformer.wte.weight");
  ASSERT_NE(wte, nullptr);
  EXPECT_EQ(wte->dtype, DType::kF32);
  EXPECT_EQ(wte->shape, (std::vector<int64_t>{50257, 16}));
  EXPECT_EQ(wte->begin_offset, 1464u + 29632u);
  EXPECT_EQ(wte->end_offset, 3247544u);
  const TensorLayout* c_attn = ckpt->Find("transformer.h.0.attn.c_attn.weight");
  ASSERT_NE(c_attn, nullptr);
  EXPECT_EQ(c_attn->shape, (std::vector<int64_t>{16, 48}));
  EXPECT_EQ(c_attn->begin_offset, 1464u + 192u);
  EXPECT_EQ(ckpt->tensors.front().name, "transformer.h.0.attn.c_attn.bias");
  EXPECT_EQ(ckpt->Find("lm_head.weight"), nullptr);  // tied to wte, not stored
}

TEST(SafetensorsFixturesTest, MetadataFromSaveModelIsKept) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(
      fixtures + "/safetensors/st_mlp_coffeevampir_f32-metadata/model.safetensors", "model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata, (std::map<std::string, std::string>{{"version", "1.0"}, {"git_tag", "v1.45"}}));
  ASSERT_EQ(file->tensors.size(), 4u);
  EXPECT_EQ(file->tensors[1].name, "fc1.weight");
  EXPECT_EQ(file->tensors[1].shape, (std::vector<int64_t>{20, 10}));
  EXPECT_EQ(file->data_begin_offset, 8u + 320u);
  EXPECT_EQ(file->tensors.back().end_offset, 2048u);
}

TEST(SafetensorsFixturesTest, UnpaddedHeaderFromCustomShardingReads) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  // This shard's header is exactly 128 bytes of JSON with no padding spaces.
  absl::StatusOr<Checkpoint> ckpt =
      OpenCheckpoint(fixtures +
                     "/safetensors/llama3.2-3b_layernorm_bf16/"
                     "model-00001-model.layers.0.input_layernorm.weight.safetensors");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const TensorLayout* norm = ckpt->Find("model.layers.0.input_layernorm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->dtype, DType::kBF16);
  EXPECT_EQ(norm->shape, std::vector<int64_t>{3072});
  EXPECT_EQ(norm->begin_offset, 136u);
}

TEST(CheckpointIndexFixturesTest, EveryIndexReads) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  const std::vector<std::string> paths = FilesEndingWith(fixtures + "/hf", ".index.json");
  EXPECT_GE(paths.size(), 8u);
  for (const std::string& path : paths) {
    absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex(path);
    ASSERT_TRUE(index.ok()) << index.status();
    EXPECT_EQ(index->path, path);
    EXPECT_FALSE(index->weight_map.empty()) << path;
    if (index->total_size_bytes != -1) {
      EXPECT_GT(index->total_size_bytes, 0) << path;
    }
  }
}

TEST(CheckpointIndexFixturesTest, GemmaIndexHasItsRealContents) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex(fixtures + "/hf/gemma-2b-it");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->path, fixtures + "/hf/gemma-2b-it/model.safetensors.index.json");
  EXPECT_EQ(index->weight_map.size(), 164u);
  EXPECT_EQ(index->total_size_bytes, 5012344832);
  EXPECT_EQ(index->weight_map.at("model.embed_tokens.weight"), "model-00001-of-00002.safetensors");
  EXPECT_EQ(index->weight_map.count("lm_head.weight"), 0u);  // Gemma ties embeddings
}

TEST(CheckpointIndexFixturesTest, FolderWithOnlyBinIndexReadsIt) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  absl::StatusOr<CheckpointIndex> index =
      ReadCheckpointIndex(fixtures + "/hf/mistral-7b-v0.1_fp32_bin-index");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_THAT(index->path, ::testing::EndsWith("/pytorch_model.bin.index.json"));
  EXPECT_EQ(index->weight_map.size(), 291u);
  EXPECT_EQ(index->total_size_bytes, 28966928384);
}

TEST(CheckpointIndexFixturesTest, FolderWithBothIndexesPrefersSafetensors) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex(fixtures + "/hf/mixtral-8x7b_dolphin2.5");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_THAT(index->path, ::testing::EndsWith("/model.safetensors.index.json"));
  EXPECT_EQ(index->weight_map.size(), 995u);
  EXPECT_EQ(index->weight_map.begin()->second.rfind("model-", 0), 0u);
}

TEST(CheckpointIndexFixturesTest, OpeningIndexWithoutShardsNamesTheMissingShard) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  // The fixtures hold indexes only; the weights were never downloaded.
  absl::StatusOr<Checkpoint> ckpt = OpenCheckpoint(fixtures + "/hf/gemma-2b-it");
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(ckpt.status().message()), ::testing::HasSubstr("model-00001-of-00002.safetensors"));
}

TEST(CheckpointIndexFixturesTest, FolderWithOnlyBinWeightsSaysSo) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  absl::StatusOr<Checkpoint> ckpt = OpenCheckpoint(fixtures + "/hf/mistral-7b-v0.1_fp32_bin-index");
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(ckpt.status().message()), ::testing::HasSubstr("PyTorch .bin checkpoint"));
}

}  // namespace
}  // namespace metaload
