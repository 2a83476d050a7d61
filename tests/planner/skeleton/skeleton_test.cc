// Skeleton JSON (docs/skeleton-format.md): round trip, stable bytes, one test per validation
// error; DeriveSkeleton's model order; PlacementUnitOf.
#include "planner/skeleton/skeleton.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/planner/model_builders.h"

namespace metaload {
namespace {

using ::metaload::testing::CheckpointFor;
using ::metaload::testing::LlamaLikeSkeleton;
using ::metaload::testing::MakeTensor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// A skeleton using every feature of the format.
Skeleton FullSkeleton() {
  Skeleton s = LlamaLikeSkeleton(2);
  SkeletonTensor inv_freq = MakeTensor("model.rotary_emb.inv_freq", {8}, DType::kF32);
  inv_freq.is_buffer = true;
  inv_freq.persistent = false;
  inv_freq.init = "rope_inv_freq(base=10000,dim=16)";
  s.tensors.insert(s.tensors.begin() + 1, inv_freq);
  SkeletonTensor mask = MakeTensor("model.causal_mask", {4, 4}, DType::kBool);
  mask.is_buffer = true;
  s.tensors.push_back(mask);
  s.modules.push_back(SkeletonModule{"", "LlamaForCausalLM", false});
  s.tied_groups.push_back({"model.embed_tokens.weight", "lm_head.weight.alias"});
  return s;
}

std::string Wrap(const std::string& tensors_and_rest) {
  return absl::StrCat("{\"format\": \"metaload.skeleton/1\", ", tensors_and_rest, "}");
}

void ExpectInvalid(const std::string& text, const std::string& substring) {
  absl::StatusOr<Skeleton> parsed = ParseSkeletonJson(text, "model.json");
  ASSERT_FALSE(parsed.ok()) << "expected an error containing: " << substring;
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(substring));
  EXPECT_THAT(std::string(parsed.status().message()), ::testing::StartsWith("model.json"));
}

TEST(SkeletonJsonTest, RoundTripKeepsEveryField) {
  const Skeleton original = FullSkeleton();
  absl::StatusOr<Skeleton> parsed = ParseSkeletonJson(SkeletonToJson(original), "model.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->model, original.model);
  EXPECT_EQ(parsed->architecture, original.architecture);
  ASSERT_EQ(parsed->tensors.size(), original.tensors.size());
  for (size_t i = 0; i < original.tensors.size(); ++i) {
    const SkeletonTensor& a = parsed->tensors[i];
    const SkeletonTensor& b = original.tensors[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(a.dtype, b.dtype);
    EXPECT_EQ(a.is_buffer, b.is_buffer);
    EXPECT_EQ(a.persistent, b.persistent);
    EXPECT_EQ(a.init, b.init);
  }
  ASSERT_EQ(parsed->modules.size(), original.modules.size());
  for (size_t i = 0; i < original.modules.size(); ++i) {
    EXPECT_EQ(parsed->modules[i].path, original.modules[i].path);
    EXPECT_EQ(parsed->modules[i].type, original.modules[i].type);
    EXPECT_EQ(parsed->modules[i].no_split, original.modules[i].no_split);
  }
  EXPECT_EQ(parsed->tied_groups, original.tied_groups);
  ASSERT_TRUE(original.attention.has_value());
  EXPECT_EQ(parsed->attention, original.attention);
  EXPECT_EQ(SkeletonToJson(*parsed), SkeletonToJson(original));
}

TEST(SkeletonJsonTest, GoldenOutputHasOneEntryPerLine) {
  Skeleton s;
  s.model = "tiny";
  s.tensors.push_back(MakeTensor("emb.weight", {4, 2}));
  SkeletonTensor inv_freq = MakeTensor("rope.inv_freq", {1}, DType::kF32);
  inv_freq.is_buffer = true;
  inv_freq.persistent = false;
  inv_freq.init = "rope";
  s.tensors.push_back(inv_freq);
  s.modules.push_back(SkeletonModule{"emb", "Embedding", true});
  s.tied_groups.push_back({"emb.weight", "head.weight"});
  EXPECT_EQ(
      SkeletonToJson(s),
      "{\n"
      "  \"format\": \"metaload.skeleton/1\",\n"
      "  \"model\": \"tiny\",\n"
      "  \"architecture\": \"\",\n"
      "  \"tensors\": [\n"
      "    {\"name\": \"emb.weight\", \"shape\": [4, 2], \"dtype\": \"BF16\", \"kind\": \"parameter\"},\n"
      "    {\"name\": \"rope.inv_freq\", \"shape\": [1], \"dtype\": \"F32\", \"kind\": \"buffer\", "
      "\"persistent\": false, \"init\": \"rope\"}\n"
      "  ],\n"
      "  \"modules\": [\n"
      "    {\"path\": \"emb\", \"type\": \"Embedding\", \"no_split\": true}\n"
      "  ],\n"
      "  \"tied\": [\n"
      "    [\"emb.weight\", \"head.weight\"]\n"
      "  ]\n"
      "}\n");
}

TEST(SkeletonJsonTest, AttentionIsWrittenOnOneLineAfterArchitectureAndReadBack) {
  Skeleton s;
  s.model = "tiny";
  s.attention = AttentionGeometry{8, 2, 16};
  s.tensors.push_back(MakeTensor("emb.weight", {4, 2}));
  const std::string json = SkeletonToJson(s);
  EXPECT_THAT(json, HasSubstr("  \"architecture\": \"\",\n"
                              "  \"attention\": {\"heads\": 8, \"kv_heads\": 2, \"head_dim\": 16},\n"
                              "  \"tensors\": [\n"));
  absl::StatusOr<Skeleton> parsed = ParseSkeletonJson(json, "model.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->attention.has_value());
  EXPECT_EQ(*parsed->attention, (AttentionGeometry{8, 2, 16}));
  EXPECT_EQ(SkeletonToJson(*parsed), json);
  // Unknown (a skeleton derived from a checkpoint): not written, and absent when read back.
  s.attention.reset();
  EXPECT_THAT(SkeletonToJson(s), Not(HasSubstr("attention")));
  EXPECT_FALSE(ParseSkeletonJson(SkeletonToJson(s), "model.json")->attention.has_value());
}

TEST(SkeletonJsonTest, EmptyListsAndScalarsWriteCompactly) {
  Skeleton s;
  s.tensors.push_back(MakeTensor("scale", {}, DType::kF32));
  const std::string json = SkeletonToJson(s);
  EXPECT_THAT(json, HasSubstr("\"shape\": []"));
  EXPECT_THAT(json, HasSubstr("\"modules\": [],\n"));
  EXPECT_THAT(json, HasSubstr("\"tied\": []\n"));
  ASSERT_TRUE(ParseSkeletonJson(json, "x").ok());
  EXPECT_EQ(s.total_size_bytes(), 4u);
}

TEST(SkeletonJsonTest, MinimalFileUsesDefaults) {
  absl::StatusOr<Skeleton> s = ParseSkeletonJson(
      Wrap("\"tensors\": [{\"name\": \"w\", \"shape\": [3, 5], \"dtype\": \"F16\"}]"), "m.json");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->tensors.size(), 1u);
  EXPECT_FALSE(s->tensors[0].is_buffer);
  EXPECT_TRUE(s->tensors[0].persistent);
  EXPECT_EQ(s->tensors[0].size_bytes(), 30u);
  EXPECT_TRUE(s->modules.empty());
  EXPECT_TRUE(s->tied_groups.empty());
  EXPECT_EQ(s->Find("w"), &s->tensors[0]);
  EXPECT_EQ(s->Find("v"), nullptr);
}

// "tp_rules" was reserved and accepted as anything; now it is defined
// (tests/planner/strategy/tp_rules_test.cc) and parsed strictly, like every other key.
TEST(SkeletonJsonTest, TpRulesMustBeAnArrayOfRules) {
  EXPECT_TRUE(ParseSkeletonJson(Wrap("\"tensors\": [], \"tp_rules\": []"), "m.json").ok());
  EXPECT_FALSE(ParseSkeletonJson(Wrap("\"tensors\": [], \"tp_rules\": {\"anything\": [1]}"), "m.json").ok());
}

TEST(SkeletonJsonTest, RejectsInvalidJson) { ExpectInvalid("{\"format\": ", "model.json: invalid JSON"); }

TEST(SkeletonJsonTest, RejectsNonObject) { ExpectInvalid("[1, 2]", "expected an object, found array"); }

TEST(SkeletonJsonTest, RejectsRepeatedKey) {
  ExpectInvalid(Wrap("\"tensors\": [], \"tensors\": []"), "duplicate key \"tensors\"");
}

TEST(SkeletonJsonTest, RejectsMissingFormat) {
  ExpectInvalid("{\"tensors\": []}", "missing field \"format\"");
}

TEST(SkeletonJsonTest, RejectsOtherFormat) {
  ExpectInvalid("{\"format\": \"metaload.skeleton/2\", \"tensors\": []}",
                "field \"format\": expected \"metaload.skeleton/1\", found \"metaload.skeleton/2\"");
}

TEST(SkeletonJsonTest, RejectsUnknownTopLevelKey) {
  ExpectInvalid(Wrap("\"tensors\": [], \"layers\": 3"), "unknown field \"layers\"");
}

TEST(SkeletonJsonTest, RejectsTensorsNotArray) {
  ExpectInvalid(Wrap("\"tensors\": {}"), "field \"tensors\": expected an array, found object");
}

TEST(SkeletonJsonTest, RejectsUnknownTensorKey) {
  ExpectInvalid(
      Wrap("\"tensors\": [{\"name\": \"w\", \"shape\": [1], \"dtype\": \"F32\", \"device\": \"meta\"}]"),
      "tensors[0]: unknown field \"device\"");
}

TEST(SkeletonJsonTest, RejectsMissingTensorShape) {
  ExpectInvalid(Wrap("\"tensors\": [{\"name\": \"w\", \"dtype\": \"F32\"}]"),
                "tensors[0]: missing field \"shape\"");
}

TEST(SkeletonJsonTest, RejectsEmptyName) {
  ExpectInvalid(Wrap("\"tensors\": [{\"name\": \"\", \"shape\": [1], \"dtype\": \"F32\"}]"),
                "tensors[0]: field \"name\" is empty");
}

TEST(SkeletonJsonTest, RejectsDuplicateTensorName) {
  ExpectInvalid(Wrap("\"tensors\": [{\"name\": \"w\", \"shape\": [1], \"dtype\": \"F32\"},"
                     "{\"name\": \"w\", \"shape\": [2], \"dtype\": \"F32\"}]"),
                "tensors[1] (\"w\"): tensor \"w\" is already tensors[0]");
}

TEST(SkeletonJsonTest, RejectsUnknownDtype) {
  ExpectInvalid(Wrap("\"tensors\": [{\"name\": \"w\", \"shape\": [1], \"dtype\": \"bfloat16\"}]"),
                "tensors[0] (\"w\"): field \"dtype\": unknown dtype \"bfloat16\"");
}

TEST(SkeletonJsonTest, RejectsNegativeDimension) {
  ExpectInvalid(Wrap("\"tensors\": [{\"name\": \"w\", \"shape\": [4, -3], \"dtype\": \"F32\"}]"),
                "tensors[0] (\"w\"): field \"shape\"[1]: dimension -3 is negative");
}

TEST(SkeletonJsonTest, RejectsFractionalDimension) {
  ExpectInvalid(Wrap("\"tensors\": [{\"name\": \"w\", \"shape\": [4.5], \"dtype\": \"F32\"}]"),
                "field \"shape\"[0]: dimension must be a non-negative integer, found 4.5");
}

TEST(SkeletonJsonTest, RejectsDimensionBeyond63Bits) {
  ExpectInvalid(Wrap("\"tensors\": [{\"name\": \"w\", \"shape\": [9223372036854775808], \"dtype\": \"U8\"}]"),
                "dimension 9223372036854775808 does not fit in 63 bits");
}

TEST(SkeletonJsonTest, RejectsTensorLargerThan64Bits) {
  ExpectInvalid(
      Wrap("\"tensors\": [{\"name\": \"w\", \"shape\": [4294967296, 4294967296], \"dtype\": \"BF16\"}]"),
      "tensors[0] (\"w\"): shape [4294967296, 4294967296] of BF16 is 2^63 bytes or more");
}

// Under 2^64 bytes, but more elements than an int64 holds (UBSan found NumElements overflowing).
TEST(SkeletonJsonTest, RejectsTensorOf2To63BytesOrMore) {
  ExpectInvalid(
      Wrap("\"tensors\": [{\"name\": \"w\", \"shape\": [4611686018427387904, 3], \"dtype\": \"U8\"}]"),
      "tensors[0] (\"w\"): shape [4611686018427387904, 3] of U8 is 2^63 bytes or more");
}

TEST(SkeletonJsonTest, RejectsModelLargerThan64Bits) {
  ExpectInvalid(Wrap("\"tensors\": [{\"name\": \"a\", \"shape\": [6917529027641081856], \"dtype\": \"U8\"},"
                     "{\"name\": \"b\", \"shape\": [6917529027641081856], \"dtype\": \"U8\"},"
                     "{\"name\": \"c\", \"shape\": [6917529027641081856], \"dtype\": \"U8\"}]"),
                "tensors[2] (\"c\"): tensor \"c\" takes the model past 2^64 bytes");
}

TEST(SkeletonJsonTest, RejectsUnknownKind) {
  ExpectInvalid(
      Wrap("\"tensors\": [{\"name\": \"w\", \"shape\": [1], \"dtype\": \"F32\", \"kind\": \"param\"}]"),
      "field \"kind\": expected \"parameter\" or \"buffer\", found \"param\"");
}

TEST(SkeletonJsonTest, RejectsNonPersistentParameter) {
  ExpectInvalid(
      Wrap("\"tensors\": [{\"name\": \"w\", \"shape\": [1], \"dtype\": \"F32\", \"persistent\": false}]"),
      "tensors[0] (\"w\"): only a buffer can be non-persistent");
}

TEST(SkeletonJsonTest, RejectsInitOnPersistentTensor) {
  ExpectInvalid(Wrap("\"tensors\": [{\"name\": \"b\", \"shape\": [1], \"dtype\": \"F32\", \"kind\": "
                     "\"buffer\", \"init\": \"x\"}]"),
                "tensors[0] (\"b\"): field \"init\" is only for non-persistent buffers");
}

// Before: registered and planned, then left unfilled on every rank at load (exit 3).
TEST(SkeletonJsonTest, RejectsAnInitRuleThatDoesNotParse) {
  ExpectInvalid(
      Wrap("\"tensors\": [{\"name\": \"rope.inv_freq\", \"shape\": [8], \"dtype\": \"F32\", \"kind\": "
           "\"buffer\", \"persistent\": false, \"init\": \"rope_inv_freq(base=-1, dim=8)\"}]"),
      "tensors[0] (\"rope.inv_freq\"): field \"init\": init rule \"rope_inv_freq(base=-1, dim=8)\": "
      "expected an argument name at position 22");
}

TEST(SkeletonJsonTest, RejectsNonBoolPersistent) {
  ExpectInvalid(
      Wrap("\"tensors\": [{\"name\": \"b\", \"shape\": [1], \"dtype\": \"F32\", \"persistent\": 0}]"),
      "field \"persistent\": expected true or false, found number");
}

std::string WithAttention(const std::string& attention) {
  return Wrap(absl::StrCat("\"attention\": ", attention, ", \"tensors\": []"));
}

TEST(SkeletonJsonTest, RejectsAttentionNotAnObject) {
  ExpectInvalid(WithAttention("[32, 8, 128]"), "field \"attention\": expected an object, found array");
}

TEST(SkeletonJsonTest, RejectsAttentionMissingAField) {
  ExpectInvalid(WithAttention("{\"heads\": 32, \"head_dim\": 128}"),
                "field \"attention\": missing field \"kv_heads\"");
}

TEST(SkeletonJsonTest, RejectsAttentionUnknownField) {
  ExpectInvalid(WithAttention("{\"heads\": 32, \"kv_heads\": 8, \"head_dim\": 128, \"rope\": 1}"),
                "field \"attention\": unknown field \"rope\"");
}

TEST(SkeletonJsonTest, RejectsAttentionFieldNotAnInteger) {
  ExpectInvalid(WithAttention("{\"heads\": 32, \"kv_heads\": \"8\", \"head_dim\": 128}"),
                "field \"attention\": field \"kv_heads\": expected an integer, found string");
}

TEST(SkeletonJsonTest, RejectsAttentionFieldNotPositive) {
  ExpectInvalid(WithAttention("{\"heads\": 32, \"kv_heads\": 0, \"head_dim\": 128}"),
                "field \"attention\": field \"kv_heads\": 0 is not in [1, 16777216]");
  ExpectInvalid(WithAttention("{\"heads\": 32, \"kv_heads\": 8, \"head_dim\": -128}"),
                "field \"attention\": field \"head_dim\": -128 is not in [1, 16777216]");
}

TEST(SkeletonJsonTest, RejectsAttentionFieldTooLarge) {
  ExpectInvalid(WithAttention("{\"heads\": 16777217, \"kv_heads\": 1, \"head_dim\": 1}"),
                "field \"attention\": field \"heads\": 16777217 is not in [1, 16777216]");
}

TEST(SkeletonJsonTest, RejectsAttentionHeadsNotAMultipleOfKvHeads) {
  ExpectInvalid(WithAttention("{\"heads\": 12, \"kv_heads\": 8, \"head_dim\": 128}"),
                "field \"attention\": \"heads\" (12) is not a multiple of \"kv_heads\" (8)");
}

constexpr char kTwoTensors[] =
    "\"tensors\": [{\"name\": \"emb.weight\", \"shape\": [1], \"dtype\": \"F32\"},"
    "{\"name\": \"head.bias\", \"shape\": [1], \"dtype\": \"F32\"}]";

TEST(SkeletonJsonTest, RejectsDuplicateModulePath) {
  ExpectInvalid(Wrap(absl::StrCat(kTwoTensors, ", \"modules\": [{\"path\": \"emb\"}, {\"path\": \"emb\"}]")),
                "modules[1]: module \"emb\" is already modules[0]");
}

TEST(SkeletonJsonTest, RejectsUnknownModuleKey) {
  ExpectInvalid(Wrap(absl::StrCat(kTwoTensors, ", \"modules\": [{\"path\": \"emb\", \"nosplit\": true}]")),
                "modules[0]: unknown field \"nosplit\"");
}

TEST(SkeletonJsonTest, RejectsTiedGroupOfOne) {
  ExpectInvalid(Wrap(absl::StrCat(kTwoTensors, ", \"tied\": [[\"emb.weight\"]]")),
                "tied[0]: a tied group is an array of at least two tensor names");
}

TEST(SkeletonJsonTest, RejectsTiedStoredNameThatIsNoTensor) {
  ExpectInvalid(Wrap(absl::StrCat(kTwoTensors, ", \"tied\": [[\"lm_head.weight\", \"emb.weight\"]]")),
                "tied[0]: \"lm_head.weight\" is not in \"tensors\"");
}

TEST(SkeletonJsonTest, RejectsTiedAliasThatIsATensor) {
  ExpectInvalid(Wrap(absl::StrCat(kTwoTensors, ", \"tied\": [[\"emb.weight\", \"head.bias\"]]")),
                "tied[0]: alias \"head.bias\" is also in \"tensors\"");
}

TEST(SkeletonJsonTest, RejectsNameInTwoTiedGroups) {
  ExpectInvalid(
      Wrap(absl::StrCat(kTwoTensors, ", \"tied\": [[\"emb.weight\", \"a\"], [\"head.bias\", \"a\"]]")),
      "tied[1]: \"a\" is already in tied[0]");
}

TEST(SkeletonJsonTest, RejectsNonStringTiedName) {
  ExpectInvalid(Wrap(absl::StrCat(kTwoTensors, ", \"tied\": [[\"emb.weight\", 3]]")),
                "tied[0][1]: expected a string, found number");
}

std::vector<std::string> Names(const Skeleton& s) {
  std::vector<std::string> names;
  for (const SkeletonTensor& t : s.tensors) names.push_back(t.name);
  return names;
}

TEST(DeriveSkeletonTest, OrdersLlamaByLayerNumberNotByName) {
  // The checkpoint lists tensors by name, so layers.10 and layers.11 come before layers.2.
  const Skeleton model = LlamaLikeSkeleton(12);
  const Checkpoint checkpoint = CheckpointFor(model);
  ASSERT_EQ(checkpoint.tensors[0].name, "lm_head.weight");

  const Skeleton derived = DeriveSkeleton(checkpoint, "llama");
  EXPECT_EQ(derived.model, "llama");
  EXPECT_EQ(derived.architecture, "");
  EXPECT_TRUE(derived.tied_groups.empty());
  std::vector<std::string> expected;
  expected.push_back("model.embed_tokens.weight");
  for (int layer = 0; layer < 12; ++layer) {
    std::vector<std::string> block;
    for (const SkeletonTensor& t : testing::LlamaLayerTensors(layer, 16, 32)) block.push_back(t.name);
    std::sort(block.begin(), block.end());  // within a block: by name
    expected.insert(expected.end(), block.begin(), block.end());
  }
  expected.push_back("model.norm.weight");
  expected.push_back("lm_head.weight");
  EXPECT_EQ(Names(derived), expected);

  ASSERT_EQ(derived.modules.size(), 12u);
  for (int layer = 0; layer < 12; ++layer) {
    EXPECT_EQ(derived.modules[layer].path, absl::StrCat("model.layers.", layer));
    EXPECT_EQ(derived.modules[layer].type, "");
    EXPECT_TRUE(derived.modules[layer].no_split);
  }
  const SkeletonTensor* q = derived.Find("model.layers.3.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(q->dtype, DType::kBF16);
  EXPECT_TRUE(q->persistent);
}

Checkpoint CheckpointWithNames(const std::vector<std::string>& names) {
  Skeleton s;
  for (const std::string& name : names) s.tensors.push_back(MakeTensor(name, {2}));
  return CheckpointFor(s);
}

TEST(DeriveSkeletonTest, TiesTheFilesRecordBecomeTiedGroupsThatParseBack) {
  Checkpoint checkpoint = CheckpointWithNames({"embed.weight", "norm.weight"});
  checkpoint.saved_ties = {{"head.weight", "embed.weight"}, {"out.weight", "embed.weight"}};
  const Skeleton derived = DeriveSkeleton(checkpoint, "toy");
  EXPECT_THAT(derived.tied_groups, ElementsAre(ElementsAre("embed.weight", "head.weight", "out.weight")));
  absl::StatusOr<Skeleton> parsed = ParseSkeletonJson(SkeletonToJson(derived), "derived");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->tied_groups, derived.tied_groups);
}

TEST(DeriveSkeletonTest, OrdersGpt2EmbeddingsBlocksRestHead) {
  const Skeleton derived = DeriveSkeleton(
      CheckpointWithNames({"lm_head.weight", "transformer.h.10.attn.c_attn.weight",
                           "transformer.h.2.mlp.c_fc.weight", "transformer.h.2.attn.c_attn.weight",
                           "transformer.ln_f.weight", "transformer.wpe.weight", "transformer.wte.weight"}),
      "gpt2");
  EXPECT_THAT(
      Names(derived),
      ElementsAre("transformer.wpe.weight", "transformer.wte.weight", "transformer.h.2.attn.c_attn.weight",
                  "transformer.h.2.mlp.c_fc.weight", "transformer.h.10.attn.c_attn.weight",
                  "transformer.ln_f.weight", "lm_head.weight"));
  ASSERT_EQ(derived.modules.size(), 2u);
  EXPECT_EQ(derived.modules[0].path, "transformer.h.2");
  EXPECT_EQ(derived.modules[1].path, "transformer.h.10");
}

TEST(DeriveSkeletonTest, OrdersEncoderBlocksBeforeDecoderBlocks) {
  const Skeleton derived =
      DeriveSkeleton(CheckpointWithNames({"decoder.block.0.layer.0.weight", "decoder.block.1.layer.0.weight",
                                          "encoder.block.0.layer.0.weight", "encoder.block.1.layer.0.weight",
                                          "shared.weight", "encoder.final_layer_norm.weight"}),
                     "t5");
  EXPECT_THAT(Names(derived), ElementsAre("encoder.block.0.layer.0.weight", "encoder.block.1.layer.0.weight",
                                          "decoder.block.0.layer.0.weight", "decoder.block.1.layer.0.weight",
                                          "encoder.final_layer_norm.weight", "shared.weight"));
  ASSERT_EQ(derived.modules.size(), 4u);
  EXPECT_EQ(derived.modules[0].path, "encoder.block.0");
  EXPECT_EQ(derived.modules[3].path, "decoder.block.1");
}

TEST(DeriveSkeletonTest, BertEmbeddingsFirstAndLayersByNumber) {
  const Skeleton derived = DeriveSkeleton(
      CheckpointWithNames({"bert.embeddings.LayerNorm.weight", "bert.embeddings.word_embeddings.weight",
                           "bert.encoder.layer.11.output.dense.weight",
                           "bert.encoder.layer.9.output.dense.weight", "bert.pooler.dense.weight",
                           "classifier.weight"}),
      "bert");
  EXPECT_THAT(
      Names(derived),
      ElementsAre("bert.embeddings.LayerNorm.weight", "bert.embeddings.word_embeddings.weight",
                  "bert.encoder.layer.9.output.dense.weight", "bert.encoder.layer.11.output.dense.weight",
                  "bert.pooler.dense.weight", "classifier.weight"));
}

TEST(DeriveSkeletonTest, KeepsBlockNumberSpelling) {
  const Skeleton derived =
      DeriveSkeleton(CheckpointWithNames({"blocks.007.w", "blocks.10.w", "blocks.8.w"}), "m");
  EXPECT_THAT(Names(derived), ElementsAre("blocks.007.w", "blocks.8.w", "blocks.10.w"));
  EXPECT_EQ(derived.modules[0].path, "blocks.007");
  EXPECT_EQ(PlacementUnitOf(derived, "blocks.007.w"), "blocks.007");
}

TEST(DeriveSkeletonTest, SameCheckpointSameSkeletonJson) {
  const Checkpoint checkpoint = CheckpointFor(LlamaLikeSkeleton(5));
  EXPECT_EQ(SkeletonToJson(DeriveSkeleton(checkpoint, "m")), SkeletonToJson(DeriveSkeleton(checkpoint, "m")));
}

TEST(PlacementUnitTest, ParentModuleWithoutNoSplitAncestor) {
  Skeleton s;
  EXPECT_EQ(PlacementUnitOf(s, "lm_head.weight"), "lm_head");
  EXPECT_EQ(PlacementUnitOf(s, "model.layers.3.mlp.up_proj.weight"), "model.layers.3.mlp.up_proj");
  EXPECT_EQ(PlacementUnitOf(s, "logit_scale"), "");
}

TEST(PlacementUnitTest, OutermostNoSplitAncestorWins) {
  Skeleton s;
  s.modules = {{"model.layers.3.mlp", "LlamaMLP", true},
               {"model.layers.3", "LlamaDecoderLayer", true},
               {"model.layers.4", "LlamaDecoderLayer", false},
               {"model.layers.4.mlp", "LlamaMLP", true}};
  EXPECT_EQ(PlacementUnitOf(s, "model.layers.3.mlp.up_proj.weight"), "model.layers.3");
  EXPECT_EQ(PlacementUnitOf(s, "model.layers.3.input_layernorm.weight"), "model.layers.3");
  EXPECT_EQ(PlacementUnitOf(s, "model.layers.4.mlp.up_proj.weight"), "model.layers.4.mlp");
  EXPECT_EQ(PlacementUnitOf(s, "model.layers.4.input_layernorm.weight"), "model.layers.4.input_layernorm");
  // A path that is only a textual prefix is no ancestor.
  EXPECT_EQ(PlacementUnitOf(s, "model.layers.30.mlp.weight"), "model.layers.30.mlp");
}

TEST(PlacementUnitTest, NoSplitRootMakesOneUnit) {
  Skeleton s;
  s.modules = {{"", "Tiny", true}};
  EXPECT_EQ(PlacementUnitOf(s, "a.b.weight"), "");
  const PlacementUnitIndex index(s);
  EXPECT_EQ(index.UnitOf("c.weight"), "");
}

}  // namespace
}  // namespace metaload
