// SkeletonForCheckpoint: a folder's config.json when it has a supported one, the headers
// otherwise, a note whenever a config.json is passed over, and an error for a broken one.
#include "planner/skeleton/hf/checkpoint_skeleton.h"

#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/format/safetensors_writer.h"
#include "tests/planner/format/patterned_tensor.h"
#include "tests/planner/skeleton/hf_test_configs.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::Patterned;

// A folder "<tmp>/tiny" with one safetensors file of two tensors (and what each test adds).
class CheckpointSkeletonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path() + "/tiny";
    fs::create_directories(dir_);
  }

  Checkpoint Open(const std::string& path) {
    absl::StatusOr<Checkpoint> checkpoint = OpenCheckpoint(path);
    EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
    return checkpoint.ok() ? *checkpoint : Checkpoint{};
  }

  void WriteModel(const std::string& file = "model.safetensors") {
    const std::vector<TensorToWrite> tensors = {
        Patterned("model.embed_tokens.weight", DType::kBF16, {128, 64}),
        Patterned("model.layers.0.mlp.up_proj.weight", DType::kBF16, {96, 64})};
    absl::Status status = WriteSafetensors(dir_ + "/" + file, tensors);
    ASSERT_TRUE(status.ok()) << status;
  }

  void WriteConfig(const std::string& text) { testing::WriteFileOrDie(dir_ + "/config.json", text); }

  testing::TempDir tmp_;
  std::string dir_;
};

TEST_F(CheckpointSkeletonTest, NoConfigIsDerivedWithoutANote) {
  WriteModel();
  absl::StatusOr<CheckpointSkeleton> s = SkeletonForCheckpoint(Open(dir_), "");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->origin, SkeletonOrigin::kDerived);
  EXPECT_EQ(s->notice, "");
  EXPECT_EQ(s->config_path, "");
  EXPECT_EQ(s->skeleton.model, "tiny");
  EXPECT_EQ(s->skeleton.tensors.size(), 2u);
}

TEST_F(CheckpointSkeletonTest, SupportedConfigIsBuiltWithTiesAndBuffers) {
  WriteModel();
  nlohmann::json config = testing::TinyLlama();
  config["tie_word_embeddings"] = true;
  WriteConfig(config.dump());
  absl::StatusOr<CheckpointSkeleton> s = SkeletonForCheckpoint(Open(dir_), "llama");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->origin, SkeletonOrigin::kHfConfig);
  EXPECT_EQ(s->notice, "");
  EXPECT_EQ(s->config_path, dir_ + "/config.json");
  EXPECT_EQ(s->skeleton.model, "llama");
  EXPECT_EQ(s->skeleton.architecture, "LlamaForCausalLM");
  ASSERT_EQ(s->skeleton.tied_groups.size(), 1u);
  EXPECT_EQ(s->skeleton.tied_groups[0],
            (std::vector<std::string>{"model.embed_tokens.weight", "lm_head.weight"}));
  const SkeletonTensor* inv_freq = s->skeleton.Find("model.rotary_emb.inv_freq");
  ASSERT_NE(inv_freq, nullptr);
  EXPECT_FALSE(inv_freq->persistent);
}

TEST_F(CheckpointSkeletonTest, UnsupportedArchitectureIsDerivedWithANoteSayingWhy) {
  WriteModel();
  WriteConfig(R"({"architectures": ["BertModel"], "model_type": "bert"})");
  absl::StatusOr<CheckpointSkeleton> s = SkeletonForCheckpoint(Open(dir_), "");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->origin, SkeletonOrigin::kDerived);
  EXPECT_EQ(s->skeleton.tensors.size(), 2u);
  EXPECT_EQ(s->notice,
            dir_ +
                "/config.json: architecture \"BertModel\" is not supported, so the skeleton is derived "
                "from the safetensors headers, which show only the ties safetensors' save_model "
                "recorded and no non-persistent buffers (add them to a skeleton file if the model "
                "has any)");
}

TEST_F(CheckpointSkeletonTest, MalformedConfigIsAnErrorNamingTheFile) {
  WriteModel();
  WriteConfig(R"({"architectures": ["LlamaForCausalLM"], )");
  absl::StatusOr<CheckpointSkeleton> s = SkeletonForCheckpoint(Open(dir_), "");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr(dir_ + "/config.json"));
}

TEST_F(CheckpointSkeletonTest, SupportedArchitectureWithABadKeyIsAnErrorNotAFallback) {
  WriteModel();
  nlohmann::json config = testing::TinyLlama();
  config["hidden_size"] = "x";
  WriteConfig(config.dump());
  absl::StatusOr<CheckpointSkeleton> s = SkeletonForCheckpoint(Open(dir_), "");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr(dir_ + "/config.json"));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("hidden_size"));
}

TEST_F(CheckpointSkeletonTest, OneShardOfTheFolderIsDerivedWithANote) {
  const std::vector<TensorToWrite> tensors = {Patterned("a", DType::kF32, {100}),
                                              Patterned("b", DType::kF32, {100})};
  ASSERT_TRUE(WriteShardedCheckpoint(dir_, tensors, 500).ok());
  WriteConfig(testing::TinyLlama().dump());
  const Checkpoint whole = Open(dir_);
  ASSERT_EQ(whole.files.size(), 2u);

  absl::StatusOr<CheckpointSkeleton> one = SkeletonForCheckpoint(Open(dir_ + "/" + whole.files[0]), "");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->origin, SkeletonOrigin::kDerived);
  EXPECT_EQ(one->skeleton.tensors.size(), 1u);
  EXPECT_THAT(one->notice,
              HasSubstr("describes the whole model, and the checkpoint is only " + whole.files[0]));

  absl::StatusOr<CheckpointSkeleton> all = SkeletonForCheckpoint(whole, "");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->origin, SkeletonOrigin::kHfConfig);
}

TEST_F(CheckpointSkeletonTest, AFileBesideTheFoldersModelSafetensorsIsDerived) {
  WriteModel();
  WriteModel("extra.safetensors");
  WriteConfig(testing::TinyLlama().dump());
  absl::StatusOr<CheckpointSkeleton> s = SkeletonForCheckpoint(Open(dir_ + "/extra.safetensors"), "");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->origin, SkeletonOrigin::kDerived);
  EXPECT_FALSE(s->notice.empty());
}

}  // namespace
}  // namespace metaload
