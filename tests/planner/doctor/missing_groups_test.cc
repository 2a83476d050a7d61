// GroupMissing: runs of whole missing layers and tying mismatches become one finding each, with
// the exact words users read; everything else stays a finding per tensor. Then the same groups
// through MatchSkeleton, `check`'s text and JSON, and the refusal `register` and `plan` give.
#include "planner/doctor/missing_groups.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/doctor/check_report.h"
#include "planner/doctor/match.h"
#include "tests/planner/model_builders.h"

namespace metaload {
namespace {

using ::metaload::testing::CheckpointFor;
using ::metaload::testing::LlamaLayerTensors;
using ::metaload::testing::LlamaLikeSkeleton;
using ::metaload::testing::MakeTensor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// Every tensor name of the given layers of a LlamaLikeSkeleton, in skeleton order.
std::vector<std::string> LayerNames(const std::vector<int>& layers) {
  std::vector<std::string> names;
  for (int layer : layers) {
    for (const SkeletonTensor& t : LlamaLayerTensors(layer, 16, 32)) names.push_back(t.name);
  }
  return names;
}

std::vector<std::string> Messages(const std::vector<MissingGroup>& groups) {
  std::vector<std::string> messages;
  for (const MissingGroup& group : groups) messages.push_back(group.message);
  return messages;
}

std::vector<int> Range(int first, int last) {
  std::vector<int> out;
  for (int i = first; i <= last; ++i) out.push_back(i);
  return out;
}

TEST(GroupMissingTest, TrailingLayersAreOneFindingAskingForAnotherSize) {
  const Skeleton s = LlamaLikeSkeleton(48);
  const std::vector<std::string> missing = LayerNames(Range(36, 47));
  const std::vector<MissingGroup> groups = GroupMissing(missing, s);
  ASSERT_EQ(groups.size(), 1u);
  const MissingGroup& run = groups[0];
  EXPECT_EQ(run.kind, MissingKind::kLayers);
  EXPECT_EQ(run.message,
            "layers 36\xE2\x80\x93"
            "47 of 48 are missing: the checkpoint has 36 \xE2\x80\x94 is it another size of "
            "this model?");
  EXPECT_EQ(run.fix,
            "check against the skeleton of the checkpoint's own model (metactl skeleton CHECKPOINT reads its "
            "config.json), or use the checkpoint of the model with 48 layers");
  EXPECT_EQ(run.tensors, missing);  // every name kept, in skeleton order
  EXPECT_EQ(run.container, "model.layers");
  EXPECT_EQ(run.first_layer, 36);
  EXPECT_EQ(run.last_layer, 47);
  EXPECT_EQ(run.layer_count, 48);
  EXPECT_EQ(run.present_layer_count, 36);
}

TEST(GroupMissingTest, GapsGiveOneGroupPerRun) {
  const Skeleton s = LlamaLikeSkeleton(10);
  const std::vector<MissingGroup> groups = GroupMissing(LayerNames({3, 4, 5, 9}), s);
  EXPECT_THAT(Messages(groups), ElementsAre("layers 3\xE2\x80\x93"
                                            "5 of 10 are missing: the checkpoint has 6 of the 10",
                                            "layer 9 of 10 is missing: the checkpoint has 6 of the 10"));
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].tensors, LayerNames({3, 4, 5}));
  EXPECT_EQ(groups[1].tensors, LayerNames({9}));
  EXPECT_EQ(groups[0].fix,
            "load the missing weights (is every shard downloaded? is this the checkpoint of this model?)");
}

TEST(GroupMissingTest, ALoneTrailingLayerIsATail) {
  const Skeleton s = LlamaLikeSkeleton(4);
  EXPECT_THAT(
      Messages(GroupMissing(LayerNames({3}), s)),
      ElementsAre("layer 3 of 4 is missing: the checkpoint has 3 \xE2\x80\x94 is it another size of this "
                  "model?"));
}

TEST(GroupMissingTest, NonLayerNamesAndPartLayersStayOneFindingEach) {
  const Skeleton s = LlamaLikeSkeleton(4);
  const std::vector<std::string> missing = {"model.norm.weight", "model.layers.2.mlp.up_proj.weight",
                                            "not.in.the.skeleton"};
  const std::vector<MissingGroup> groups = GroupMissing(missing, s);
  EXPECT_THAT(Messages(groups),
              ElementsAre("model.norm.weight is in the skeleton but not in the checkpoint",
                          "model.layers.2.mlp.up_proj.weight is in the skeleton but not in "
                          "the checkpoint",
                          "not.in.the.skeleton is in the skeleton but not in the checkpoint"));
  for (const MissingGroup& group : groups) {
    EXPECT_EQ(group.kind, MissingKind::kTensor);
    EXPECT_EQ(group.fix, "");
  }
}

// Every block gone is another architecture or naming (the report's diagnosis), not another size.
TEST(GroupMissingTest, EveryLayerMissingIsNotARun) {
  const Skeleton s = LlamaLikeSkeleton(2);
  const std::vector<MissingGroup> groups = GroupMissing(LayerNames({0, 1}), s);
  EXPECT_EQ(groups.size(), 18u);
  for (const MissingGroup& group : groups) EXPECT_EQ(group.kind, MissingKind::kTensor);
}

TEST(GroupMissingTest, SeveralContainersAreNamed) {
  Skeleton s;
  for (const char* container : {"model.encoder.layers", "model.decoder.layers"}) {
    for (int layer = 0; layer < 3; ++layer) {
      s.tensors.push_back(MakeTensor(absl::StrCat(container, ".", layer, ".fc.weight"), {4, 4}));
    }
  }
  EXPECT_THAT(
      Messages(GroupMissing({"model.decoder.layers.1.fc.weight", "model.decoder.layers.2.fc.weight"}, s)),
      ElementsAre("layers 1\xE2\x80\x93"
                  "2 of 3 in model.decoder.layers are missing: the checkpoint has 1 "
                  "\xE2\x80\x94 is it another size of this model?"));
}

// tie_word_embeddings false: the skeleton names lm_head.weight as a tensor of its own.
TEST(GroupMissingTest, MissingHeadBesideAStoredEmbeddingIsATyingMismatch) {
  const Skeleton s = LlamaLikeSkeleton(1);
  const std::vector<MissingGroup> groups = GroupMissing({"lm_head.weight"}, s);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].kind, MissingKind::kTyingMismatch);
  EXPECT_EQ(groups[0].partner, "model.embed_tokens.weight");
  EXPECT_THAT(groups[0].tensors, ElementsAre("lm_head.weight"));
  EXPECT_EQ(
      groups[0].message,
      "lm_head.weight is missing but the checkpoint has model.embed_tokens.weight of the same shape: a tying "
      "mismatch (the checkpoint was saved with tied embeddings; the skeleton does not tie them, as with "
      "tie_word_embeddings false)");
  EXPECT_EQ(
      groups[0].fix,
      "if the model ties them, set \"tie_word_embeddings\": true in config.json, or add "
      "[\"model.embed_tokens.weight\", \"lm_head.weight\"] to the skeleton's \"tied\"; if it does not, this "
      "checkpoint lacks the trained lm_head.weight: use the model's own checkpoint");
}

TEST(GroupMissingTest, NoTyingMismatchWithoutAUsableUntiedPartnerOfTheSameShape) {
  const std::string kAlone = "lm_head.weight is in the skeleton but not in the checkpoint";
  const Skeleton s = LlamaLikeSkeleton(1);
  // The embedding is missing too: nothing to tie to.
  EXPECT_THAT(Messages(GroupMissing({"model.embed_tokens.weight", "lm_head.weight"}, s)),
              ElementsAre("model.embed_tokens.weight is in the skeleton but not in the checkpoint", kAlone));
  // The embedding is stored with another shape.
  EXPECT_THAT(Messages(GroupMissing({"lm_head.weight"}, s, {"model.embed_tokens.weight"})),
              ElementsAre(kAlone));
  // Another shape in the skeleton (a head over another vocabulary).
  Skeleton other = s;
  other.tensors.back().shape = {65, 16};
  EXPECT_THAT(Messages(GroupMissing({"lm_head.weight"}, other)), ElementsAre(kAlone));
  // The skeleton already ties them (tie_word_embeddings true): the tie is not the problem.
  Skeleton tied = s;
  tied.tied_groups = {{"model.embed_tokens.weight", "lm_head.weight"}};
  EXPECT_THAT(Messages(GroupMissing({"lm_head.weight"}, tied)), ElementsAre(kAlone));
}

TEST(MissingLinesTest, TensorLinesAreCutAfterTheLimitGroupsNever) {
  const Skeleton s = LlamaLikeSkeleton(4);
  std::vector<std::string> missing = LayerNames({3});
  for (const char* name :
       {"model.norm.weight", "model.layers.0.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weight"}) {
    missing.push_back(name);
  }
  EXPECT_THAT(MissingLines(GroupMissing(missing, s), 1),
              ElementsAre(HasSubstr("layer 3 of 4 is missing"),
                          "model.norm.weight is in the skeleton but not in the checkpoint",
                          "\xE2\x80\xA6 and 2 more"));
  EXPECT_EQ(MissingLines(GroupMissing(missing, s), 3).size(), 4u);
}

// The checkpoint of a 4-layer model saved with tied embeddings (no lm_head.weight), for a
// 6-layer skeleton that does not tie them.
Checkpoint SmallerTiedCheckpoint() {
  Skeleton smaller = LlamaLikeSkeleton(4);
  smaller.tensors.pop_back();
  return CheckpointFor(smaller);
}

TEST(MissingGroupsReportTest, CheckTextShowsEachGroupOnceAndJsonEveryTensor) {
  const Skeleton s = LlamaLikeSkeleton(6);
  const MatchReport report = MatchSkeleton(s, SmallerTiedCheckpoint());
  ASSERT_EQ(report.missing.size(), 19u);
  ASSERT_EQ(report.missing_groups.size(), 2u);
  const std::string text = CheckReportToText(report, {"model.json", "/ckpt", "m"});
  EXPECT_THAT(
      text, HasSubstr("\nwould stay on meta (19):\n"
                      "  layers 4\xE2\x80\x93"
                      "5 of 6 are missing: the checkpoint has 4 \xE2\x80\x94 is it "
                      "another size of this model?\n"
                      "    fix: check against the skeleton of the checkpoint's own model (metactl skeleton "
                      "CHECKPOINT reads its config.json), or use the checkpoint of the model with 6 layers\n"
                      "  lm_head.weight is missing but the checkpoint has model.embed_tokens.weight of the "
                      "same shape: a tying mismatch"));
  EXPECT_THAT(text, Not(HasSubstr("model.layers.4.mlp.up_proj.weight")));
  EXPECT_THAT(text, ::testing::EndsWith("\nverdict: 19 tensors would stay on meta\n"));

  const nlohmann::json json = nlohmann::json::parse(CheckReportToJson(report, {"model.json", "/ckpt", "m"}));
  EXPECT_EQ(json["would_stay_meta"].size(), 19u);  // the full per-tensor list stays
  ASSERT_EQ(json["missing_groups"].size(), 2u);
  EXPECT_EQ(json["missing_groups"][0]["problem"], "layers");
  EXPECT_EQ(json["missing_groups"][0]["first_layer"], 4);
  EXPECT_EQ(json["missing_groups"][0]["present_layers"], 4);
  EXPECT_EQ(json["missing_groups"][0]["tensors"].size(), 18u);
  EXPECT_EQ(json["missing_groups"][1]["problem"], "tying_mismatch");
  EXPECT_EQ(json["missing_groups"][1]["partner"], "model.embed_tokens.weight");
}

TEST(MissingGroupsReportTest, RefusalGivesTheGroupsInTheSameWords) {
  const Skeleton s = LlamaLikeSkeleton(6);
  MatchReport report = MatchSkeleton(s, SmallerTiedCheckpoint());
  const absl::Status status = MatchToStatus(report, "m");
  EXPECT_THAT(
      std::string(status.message()),
      HasSubstr("model m: 19 tensors would stay on meta: layers 4\xE2\x80\x93"
                "5 of 6 are missing: the "
                "checkpoint has 4 \xE2\x80\x94 is it another size of this model?; lm_head.weight is missing "
                "but the checkpoint has model.embed_tokens.weight of the same shape: a tying mismatch"));
  // An init policy covers the missing tensors (`register --init-missing`): the groups go with them.
  report.missing.clear();
  EXPECT_TRUE(MatchToStatus(report, "m").ok());
}

// A tensor of a shard the folder lacks is explained by its shard, never grouped.
TEST(MissingGroupsReportTest, TensorsOfAnAbsentShardAreNotGrouped) {
  const Skeleton s = LlamaLikeSkeleton(4);
  CheckpointIndex index;
  index.path = "/ckpt/model.safetensors.index.json";
  for (const TensorLayout& t : CheckpointFor(s).tensors) {
    index.weight_map[t.name] =
        absl::StartsWith(t.name, "model.layers.3.") ? "model-2.safetensors" : "model-1.safetensors";
  }
  const MatchReport report = MatchSkeletonPartialDownload(s, index, {"model-2.safetensors"});
  EXPECT_EQ(report.missing.size(), 9u);
  EXPECT_TRUE(report.missing_groups.empty());
}

}  // namespace
}  // namespace metaload
