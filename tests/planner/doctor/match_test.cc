// MatchSkeleton / MatchSkeletonNames and the meta doctor's report: each crafted mismatch
// gives exactly its finding (the words users read), its fix, and the right verdict.
#include "planner/doctor/match.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/doctor/admission.h"
#include "planner/doctor/check_report.h"
#include "planner/format/dtype_conversion.h"
#include "tests/planner/model_builders.h"

namespace metaload {
namespace {

using ::metaload::testing::CheckpointFor;
using ::metaload::testing::LlamaLikeSkeleton;
using ::metaload::testing::MakeTensor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kOkVerdict[] = "verdict: OK \xE2\x80\x94 nothing would stay on meta";

void AddStored(Checkpoint& checkpoint, const std::string& name, std::vector<int64_t> shape,
               DType dtype = DType::kBF16) {
  TensorLayout layout;
  layout.name = name;
  layout.shape = std::move(shape);
  layout.dtype = dtype;
  layout.file = checkpoint.files.front();
  layout.begin_offset = checkpoint.tensors.empty() ? 64 : checkpoint.tensors.back().end_offset;
  layout.end_offset =
      layout.begin_offset + static_cast<uint64_t>(NumElements(layout.shape) * DTypeSizeBytes(dtype));
  checkpoint.tensors.push_back(std::move(layout));
  checkpoint.BuildIndex();
}

void RemoveStored(Checkpoint& checkpoint, const std::string& name) {
  std::erase_if(checkpoint.tensors, [&](const TensorLayout& t) { return t.name == name; });
  checkpoint.BuildIndex();
}

// A llama-like checkpoint whose up_proj weight (32 x 16) is stored as `codes`, with `companion`
// (a quantization's scale tensor, of `companion_shape`) beside it.
Checkpoint WithQuantizedUpProj(const Skeleton& s, DType codes, const std::string& companion,
                               std::vector<int64_t> companion_shape) {
  Checkpoint ckpt = CheckpointFor(s);
  const std::string weight = "model.layers.0.mlp.up_proj.weight";
  RemoveStored(ckpt, weight);
  AddStored(ckpt, weight, {32, 16}, codes);
  AddStored(ckpt, "model.layers.0.mlp.up_proj." + companion, std::move(companion_shape), DType::kF32);
  return ckpt;
}

void RenameStored(Checkpoint& checkpoint, const std::string& from, const std::string& to) {
  for (TensorLayout& t : checkpoint.tensors) {
    if (t.name == from) t.name = to;
  }
  checkpoint.BuildIndex();
}

std::string Text(const MatchReport& report, bool strict = true) {
  return CheckReportToText(report, {"model.json", "/ckpt", "m", strict});
}

// A Llama whose embeddings and lm_head are tied: lm_head.weight is an alias, not a tensor.
Skeleton TiedLlama() {
  Skeleton s = LlamaLikeSkeleton(1);
  s.tensors.pop_back();  // lm_head.weight
  s.tied_groups = {{"model.embed_tokens.weight", "lm_head.weight"}};
  return s;
}

TEST(MatchTest, MatchingCheckpointIsClean) {
  const Skeleton s = LlamaLikeSkeleton(2);
  const MatchReport report = MatchSkeleton(s, CheckpointFor(s));
  EXPECT_FALSE(report.WouldStayMeta());
  EXPECT_TRUE(report.unexpected.empty());
  EXPECT_EQ(report.skeleton_tensor_count, s.tensors.size());
  EXPECT_EQ(report.checkpoint_tensor_count, s.tensors.size());
  EXPECT_EQ(CheckVerdict(report, true), kOkVerdict);
  EXPECT_TRUE(MatchToStatus(report, "m").ok());
}

TEST(MatchTest, MissingHeadWouldStayMetaWithTheFixForAHead) {
  Skeleton s = LlamaLikeSkeleton(1);
  const Checkpoint ckpt = CheckpointFor(s);
  s.tensors.push_back(MakeTensor("score.weight", {2, 16}));
  const MatchReport report = MatchSkeleton(s, ckpt);
  EXPECT_THAT(report.missing, ElementsAre("score.weight"));
  EXPECT_THAT(report.WouldStayMetaNames(), ElementsAre("score.weight"));
  EXPECT_THAT(WouldStayMetaFindings(report),
              ElementsAre("score.weight is in the skeleton but not in the checkpoint"));
  const std::string text = Text(report);
  EXPECT_THAT(
      text, HasSubstr("would stay on meta (1):\n  score.weight is in the skeleton but not in the checkpoint\n"
                      "    fix: a head the checkpoint does not have: use the model class that matches the "
                      "checkpoint, or initialize it explicitly and train it (--init-missing normal:0.02 on "
                      "`metactl register` and `metactl load`)\n"));
  EXPECT_THAT(text, HasSubstr("never move a placed model afterwards"));
  EXPECT_THAT(text, ::testing::EndsWith("\nverdict: 1 tensor would stay on meta\n"));
  const absl::Status status = MatchToStatus(report, "m");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      std::string(status.message()),
      HasSubstr("model m: 1 tensor would stay on meta: score.weight is in the skeleton but not in the "
                "checkpoint; fix: use the model class that matches the checkpoint"));
}

TEST(MatchTest, MissingLayerTensorSuggestsLoadingOrInitializing) {
  const Skeleton s = LlamaLikeSkeleton(1);
  Checkpoint ckpt = CheckpointFor(s);
  RemoveStored(ckpt, "model.layers.0.mlp.up_proj.weight");
  const std::string text = Text(MatchSkeleton(s, ckpt));
  EXPECT_THAT(
      text,
      HasSubstr("  model.layers.0.mlp.up_proj.weight is in the skeleton but not in the checkpoint\n"
                "    fix: load the missing weights (is every shard downloaded? is this the "
                "checkpoint of this model?), or, if it is a new layer, initialize it explicitly "
                "before use (--init-missing zeros|normal:STD on `metactl register` and `metactl load`)\n"));
}

// The label each kind is listed under in the text report.
std::string LabelOf(ExtraKind kind) {
  switch (kind) {
    case ExtraKind::kBitsandbytes8bit:
      return "bitsandbytes 8-bit quantization state (.SCB, .weight_format)";
    case ExtraKind::kBitsandbytes4bit:
      return "bitsandbytes 4-bit quantization state (.absmax, .quant_map, .quant_state)";
    case ExtraKind::kPackedQuantized:
      return "GPTQ/AWQ packed weights (.qweight, .qzeros, .scales, .g_idx)";
    case ExtraKind::kFp8Scales:
      return "FP8 scales (.weight_scale, .weight_scale_inv, .input_scale)";
    case ExtraKind::kRotaryInvFreq:
      return "rotary inv_freq persisted by an older version";
    case ExtraKind::kStaleBuffer:
      return "buffers persisted by older versions (attn.bias, attn.masked_bias, position_ids)";
    case ExtraKind::kOther:
      break;
  }
  return "not in the skeleton";
}

class UnexpectedExtraTest : public ::testing::TestWithParam<std::pair<std::string, ExtraKind>> {};

TEST_P(UnexpectedExtraTest, IsRecognisedAndRefusedOnlyWhenStrict) {
  const auto& [name, kind] = GetParam();
  const Skeleton s = LlamaLikeSkeleton(1);
  Checkpoint ckpt = CheckpointFor(s);
  AddStored(ckpt, name, {16}, DType::kF32);
  const MatchReport report = MatchSkeleton(s, ckpt);
  EXPECT_FALSE(report.WouldStayMeta());
  EXPECT_THAT(report.unexpected, ElementsAre(name));
  ASSERT_EQ(report.extras.size(), 1u);
  EXPECT_EQ(report.extras[0].kind, kind);
  EXPECT_EQ(ClassifyExtra(name), kind);
  EXPECT_FALSE(report.different_architecture);
  const std::string lenient = Text(report, /*strict=*/false);
  EXPECT_THAT(lenient,
              HasSubstr(absl::StrCat("unexpected checkpoint tensors (not loaded; not fatal) (1):\n  ",
                                     LabelOf(kind), ": 1 tensor: ", name, "\n    why: ")));
  EXPECT_THAT(lenient, ::testing::EndsWith(absl::StrCat(kOkVerdict, " (1 unexpected tensor ignored)\n")));
  EXPECT_TRUE(CheckPasses(report, /*strict=*/false));
  EXPECT_TRUE(AdmitLoad(report, {/*strict=*/false, {}}, "m").ok());
  // Strict, as register and load run: only what older versions persisted is ignored.
  const bool benign = kind == ExtraKind::kRotaryInvFreq || kind == ExtraKind::kStaleBuffer;
  EXPECT_EQ(CheckPasses(report, /*strict=*/true), benign);
  const absl::Status admitted = AdmitLoad(report, {}, "m");
  EXPECT_EQ(admitted.ok(), benign) << admitted;
  const std::string strict = Text(report);
  if (benign) {
    EXPECT_EQ(strict, lenient);
  } else {
    EXPECT_THAT(strict,
                HasSubstr("unexpected checkpoint tensors (refused unless --no-strict; older versions' "
                          "buffers are ignored) (1):\n"));
    EXPECT_THAT(strict, HasSubstr("\nverdict: refused \u2014 1 unexpected checkpoint tensor: "));
    EXPECT_THAT(
        std::string(admitted.message()),
        HasSubstr(absl::StrCat("model m: 1 checkpoint tensor the skeleton has no place for (", name, "): ")));
  }
}

TEST(AdmissionTest, ExtraLayersNameTheSizeAndInitCannotFillMostOfTheModel) {
  const Skeleton small = LlamaLikeSkeleton(2);
  const Skeleton large = LlamaLikeSkeleton(4);
  const MatchReport report = MatchSkeleton(small, CheckpointFor(large));
  ASSERT_TRUE(report.layer_hint.has_value());
  EXPECT_EQ(ExtrasCause(report),
            "the checkpoint has 4 of model.layers, the skeleton 2: another size of this model?");
  const absl::Status refused = AdmitLoad(report, {}, "m");
  EXPECT_THAT(
      std::string(refused.message()),
      HasSubstr("the checkpoint has 4 of model.layers, the skeleton 2: another size of this model?; fix: "));
  // The other way round nothing is unexpected: 6 of 8 layers would stay on meta, and zeros may
  // not fill them.
  const MatchReport most_missing = MatchSkeleton(LlamaLikeSkeleton(8), CheckpointFor(small));
  ASSERT_GT(2 * most_missing.missing.size(), most_missing.skeleton_tensor_count);
  EXPECT_EQ(AdmitLoad(most_missing, {true, *ParseInitPolicy("error")}, "m").code(),
            absl::StatusCode::kFailedPrecondition);
  const absl::Status most = AdmitLoad(most_missing, {true, *ParseInitPolicy("zeros")}, "m");
  EXPECT_THAT(
      std::string(most.message()),
      HasSubstr(absl::StrCat("model m: --init-missing zeros would initialize ", most_missing.missing.size(),
                             " of the skeleton's ", most_missing.skeleton_tensor_count,
                             " tensors, most of the model: refused")));
  Skeleton head = small;
  head.tensors.push_back(MakeTensor("score.weight", {2, 64}, DType::kF32));
  const MatchReport one_new = MatchSkeleton(head, CheckpointFor(small));
  EXPECT_TRUE(AdmitLoad(one_new, {true, *ParseInitPolicy("zeros")}, "m").ok());
  // A whole layer is less than half but more than a tenth: --init-missing, one policy for
  // whatever is missing, may not fill it (init_budget.h).
  const MatchReport a_layer = MatchSkeleton(LlamaLikeSkeleton(3), CheckpointFor(small));
  ASSERT_GT(10 * a_layer.missing.size(), a_layer.skeleton_tensor_count);
  ASSERT_LE(2 * a_layer.missing.size(), a_layer.skeleton_tensor_count);
  const absl::Status layer = AdmitLoad(a_layer, {true, *ParseInitPolicy("normal:0.02")}, "m");
  EXPECT_EQ(layer.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      std::string(layer.message()),
      HasSubstr(absl::StrCat("model m: --init-missing normal:0.02 applies to a few missing tensors only (at "
                             "most a tenth of the skeleton's: a new head, say), here ",
                             a_layer.missing.size(), " of the skeleton's ", a_layer.skeleton_tensor_count,
                             ": refused; ")));
  EXPECT_THAT(std::string(layer.message()),
              HasSubstr(absl::StrCat("what the checkpoint lacks: ", a_layer.missing.front(), ", ")));
  EXPECT_THAT(std::string(layer.message()), ::testing::EndsWith("; `metactl check` explains each"));
}

INSTANTIATE_TEST_SUITE_P(
    EachKind, UnexpectedExtraTest,
    ::testing::Values(std::pair{"model.layers.0.mlp.up_proj.SCB", ExtraKind::kBitsandbytes8bit},
                      std::pair{"model.layers.0.mlp.up_proj.weight_format", ExtraKind::kBitsandbytes8bit},
                      std::pair{"model.layers.0.mlp.up_proj.weight.absmax", ExtraKind::kBitsandbytes4bit},
                      std::pair{"model.layers.0.mlp.up_proj.weight.quant_map", ExtraKind::kBitsandbytes4bit},
                      std::pair{"model.layers.0.mlp.up_proj.weight.quant_state.bitsandbytes__nf4",
                                ExtraKind::kBitsandbytes4bit},
                      std::pair{"model.layers.0.mlp.up_proj.g_idx", ExtraKind::kPackedQuantized},
                      std::pair{"model.layers.0.mlp.up_proj.qweight", ExtraKind::kPackedQuantized},
                      std::pair{"model.layers.0.mlp.up_proj.qzeros", ExtraKind::kPackedQuantized},
                      std::pair{"model.layers.0.mlp.up_proj.scales", ExtraKind::kPackedQuantized},
                      std::pair{"model.layers.0.mlp.up_proj.weight_scale_inv", ExtraKind::kFp8Scales},
                      std::pair{"model.layers.0.self_attn.rotary_emb.inv_freq", ExtraKind::kRotaryInvFreq},
                      std::pair{"transformer.h.0.attn.masked_bias", ExtraKind::kStaleBuffer},
                      std::pair{"vision_tower.patch_embed.weight", ExtraKind::kOther}));

TEST(MatchTest, RotaryInvFreqIsExplainedAsIgnored) {
  const Skeleton s = LlamaLikeSkeleton(1);
  Checkpoint ckpt = CheckpointFor(s);
  AddStored(ckpt, "model.layers.0.self_attn.rotary_emb.inv_freq", {8}, DType::kF32);
  EXPECT_THAT(
      Text(MatchSkeleton(s, ckpt)),
      HasSubstr("    why: older transformers versions saved the rotary embedding's inv_freq; current ones "
                "compute it (a non-persistent buffer): the stored copy is ignored\n"));
}

TEST(MatchTest, WrongShapeWouldStayMetaShowingBothShapes) {
  const Skeleton s = LlamaLikeSkeleton(1);
  Checkpoint ckpt = CheckpointFor(s);
  RemoveStored(ckpt, "model.layers.0.self_attn.k_proj.weight");
  AddStored(ckpt, "model.layers.0.self_attn.k_proj.weight", {4, 16});
  const MatchReport report = MatchSkeleton(s, ckpt);
  ASSERT_EQ(report.shape_mismatches.size(), 1u);
  EXPECT_THAT(report.WouldStayMetaNames(), ElementsAre("model.layers.0.self_attn.k_proj.weight"));
  EXPECT_THAT(
      WouldStayMetaFindings(report),
      ElementsAre("model.layers.0.self_attn.k_proj.weight has shape [16, 16] in the skeleton but [4, 16] "
                  "in the checkpoint"));
  EXPECT_THAT(Text(report), HasSubstr("    fix: use the model class and config that match the checkpoint"));
  EXPECT_THAT(Text(report), ::testing::EndsWith("verdict: 1 tensor would stay on meta\n"));
}

TEST(MatchTest, WrongDtypeIsConvertedNotFatal) {
  const Skeleton s = LlamaLikeSkeleton(1);
  Checkpoint ckpt = CheckpointFor(s);
  RemoveStored(ckpt, "model.norm.weight");
  AddStored(ckpt, "model.norm.weight", {16}, DType::kF32);
  const MatchReport report = MatchSkeleton(s, ckpt);
  EXPECT_FALSE(report.WouldStayMeta());
  ASSERT_EQ(report.dtype_mismatches.size(), 1u);
  EXPECT_EQ(report.dtype_mismatches[0].checkpoint_dtype, DType::kF32);
  EXPECT_THAT(Text(report),
              HasSubstr("dtype differs (converted on load; not fatal) (1):\n  model.norm.weight is "
                        "BF16 in the skeleton but F32 in the checkpoint: converted on load\n"));
  EXPECT_EQ(CheckVerdict(report, true), kOkVerdict);
}

TEST(MatchTest, Int8WeightBesideScbIsNotJustConverted) {
  const Skeleton s = LlamaLikeSkeleton(1);
  const MatchReport report = MatchSkeleton(s, WithQuantizedUpProj(s, DType::kI8, "SCB", {32}));
  EXPECT_THAT(
      Text(report),
      HasSubstr("conversions refused (codes read as values) (1):\n  model.layers.0.mlp.up_proj.weight is "
                "BF16 in the skeleton: stored as I8 (8-bit integer codes): read as BF16 its codes would not "
                "be its values, whatever strict says; metaload dequantizes only what the "
                "quantization_config of a config.json declares (docs/quantization.md): load it into a "
                "module of its stored dtype (I8), or dequantize the checkpoint first\n    fix: load it with "
                "the quantization it was saved with (transformers: BitsAndBytesConfig(load_in_8bit=True))"));
  EXPECT_FALSE(CheckPasses(report, /*strict=*/false)) << "never OK for codes that would be read as values";
  EXPECT_THAT(CheckVerdict(report, false), HasSubstr("verdict: refused"));
}

TEST(MatchTest, Fp8CodesWithBlockScalesBesideThemAreRefusedNamingTheScales) {
  const Skeleton s = LlamaLikeSkeleton(1);
  const MatchReport report =
      MatchSkeleton(s, WithQuantizedUpProj(s, DType::kF8E4M3, "weight_scale_inv", {1, 1}));
  ASSERT_EQ(report.refused_conversions.size(), 1u);
  EXPECT_THAT(
      report.refused_conversions[0].second,
      HasSubstr(
          "stored quantized as F8_E4M3 FP8 codes with scales beside it "
          "(model.layers.0.mlp.up_proj.weight_scale_inv): read as BF16 its codes would not be its values"));
  EXPECT_THAT(CheckVerdict(report, false),
              HasSubstr("1 tensor stored as FP8 or integer codes would be read as the skeleton's dtype"));
}

TEST(DtypeConversion, FloatsCastEverythingElseIsRefused) {
  const auto none = [](const std::string&) { return false; };
  EXPECT_EQ(ConversionRefusal("w", DType::kBF16, DType::kF32, none), "");
  EXPECT_EQ(ConversionRefusal("w", DType::kF32, DType::kF16, none), "")
      << "narrowing floats is a cast, as torch's";
  EXPECT_EQ(ConversionRefusal("w", DType::kF8E4M3, DType::kF8E4M3, none), "") << "kept as stored";
  EXPECT_EQ(ConversionRefusal("w", DType::kU8, DType::kU8, none), "");
  EXPECT_THAT(ConversionRefusal("w", DType::kF8E5M2, DType::kF32, none),
              HasSubstr("stored as F8_E5M2 (FP8 codes)"));
  EXPECT_THAT(ConversionRefusal("w", DType::kI32, DType::kF32, none), HasSubstr("stored as I32 (integers)"));
  EXPECT_THAT(ConversionRefusal("w", DType::kF32, DType::kI64, none),
              HasSubstr("stored as F32, the module holds I64: a cast to it would not keep the values"));
  EXPECT_THAT(ConversionRefusal("x_blocks", DType::kU8, DType::kBF16,
                                [](const std::string& n) { return n == "x_scales"; }),
              HasSubstr("with scales beside it (x_scales)"));
}

TEST(MatchTest, GptqWeightMissingSaysWhereItIs) {
  const Skeleton s = LlamaLikeSkeleton(1);
  Checkpoint ckpt = CheckpointFor(s);
  RemoveStored(ckpt, "model.layers.0.mlp.up_proj.weight");
  AddStored(ckpt, "model.layers.0.mlp.up_proj.qweight", {2, 32}, DType::kI32);
  AddStored(ckpt, "model.layers.0.mlp.up_proj.scales", {1, 32}, DType::kF16);
  EXPECT_THAT(
      Text(MatchSkeleton(s, ckpt)),
      HasSubstr("  model.layers.0.mlp.up_proj.weight is in the skeleton but not in the checkpoint: it is "
                "stored quantized, as model.layers.0.mlp.up_proj.qweight\n    fix: load it with the "
                "checkpoint's quantization_config"));
}

TEST(MatchTest, TiedStoredUnderFirstName) {
  const Skeleton s = TiedLlama();
  const MatchReport report = MatchSkeleton(s, CheckpointFor(s));
  EXPECT_FALSE(report.WouldStayMeta());
  ASSERT_EQ(report.tied.size(), 1u);
  EXPECT_EQ(report.tied[0].source, TiedSource::kFirstName);
  EXPECT_EQ(report.tied[0].read_from, "model.embed_tokens.weight");
  EXPECT_THAT(Text(report),
              HasSubstr("tied groups (1):\n  model.embed_tokens.weight = lm_head.weight: stored under "
                        "the first name, model.embed_tokens.weight; lm_head.weight shares its "
                        "storage\n"));
}

TEST(MatchTest, TiedStoredOnlyAsAliasIsResolvedNotMissing) {
  const Skeleton s = TiedLlama();
  Checkpoint ckpt = CheckpointFor(s);
  RenameStored(ckpt, "model.embed_tokens.weight", "lm_head.weight");
  const MatchReport report = MatchSkeleton(s, ckpt);
  EXPECT_FALSE(report.WouldStayMeta());
  EXPECT_TRUE(report.missing.empty());
  EXPECT_TRUE(report.unexpected.empty());
  ASSERT_EQ(report.tied.size(), 1u);
  EXPECT_EQ(report.tied[0].source, TiedSource::kAliasOnly);
  EXPECT_EQ(report.tied[0].read_from, "lm_head.weight");
  EXPECT_THAT(Text(report),
              HasSubstr("  model.embed_tokens.weight = lm_head.weight: only lm_head.weight is stored; "
                        "resolved from the alias: model.embed_tokens.weight is read from it"));
  EXPECT_TRUE(MatchToStatus(report, "m").ok());  // what `register` decides on
}

TEST(MatchTest, TiedAliasWithWrongShapeNamesTheAlias) {
  const Skeleton s = TiedLlama();
  Checkpoint ckpt = CheckpointFor(s);
  RemoveStored(ckpt, "model.embed_tokens.weight");
  AddStored(ckpt, "lm_head.weight", {65, 16});
  EXPECT_THAT(WouldStayMetaFindings(MatchSkeleton(s, ckpt)),
              ElementsAre("model.embed_tokens.weight has shape [64, 16] in the skeleton but [65, 16] in the "
                          "checkpoint (stored as its tied alias lm_head.weight)"));
}

TEST(MatchTest, TiedBothStoredUsesTheFirst) {
  const Skeleton s = TiedLlama();
  Checkpoint ckpt = CheckpointFor(s);
  AddStored(ckpt, "lm_head.weight", {64, 16});
  const MatchReport report = MatchSkeleton(s, ckpt);
  EXPECT_FALSE(report.WouldStayMeta());
  EXPECT_TRUE(report.unexpected.empty());
  ASSERT_EQ(report.tied.size(), 1u);
  EXPECT_EQ(report.tied[0].source, TiedSource::kBoth);
  EXPECT_THAT(report.tied[0].ignored_aliases, ElementsAre("lm_head.weight"));
  EXPECT_THAT(Text(report),
              HasSubstr("  model.embed_tokens.weight = lm_head.weight: both stored; the first is used "
                        "(the bytes of lm_head.weight are not read)\n    fix: nothing, if the model "
                        "was trained tied"));
}

TEST(MatchTest, TiedNotStoredAtAllNamesTheAlias) {
  const Skeleton s = TiedLlama();
  Checkpoint ckpt = CheckpointFor(s);
  RemoveStored(ckpt, "model.embed_tokens.weight");
  const MatchReport report = MatchSkeleton(s, ckpt);
  EXPECT_THAT(
      WouldStayMetaFindings(report),
      ElementsAre("model.embed_tokens.weight is in the skeleton but not in the checkpoint (nor is its tied "
                  "alias lm_head.weight)"));
  EXPECT_EQ(report.tied[0].source, TiedSource::kNone);
}

TEST(MatchTest, NonPersistentBufferIsComputedNeverMissing) {
  Skeleton s = LlamaLikeSkeleton(1);
  const Checkpoint ckpt = CheckpointFor(s);
  SkeletonTensor inv_freq = MakeTensor("model.rotary_emb.inv_freq", {4}, DType::kF32);
  inv_freq.is_buffer = true;
  inv_freq.persistent = false;
  inv_freq.init = "rope_inv_freq(base=10000,dim=8)";
  s.tensors.insert(s.tensors.begin() + 1, inv_freq);
  const MatchReport report = MatchSkeleton(s, ckpt);
  EXPECT_FALSE(report.WouldStayMeta());
  ASSERT_EQ(report.non_persistent.size(), 1u);
  EXPECT_FALSE(report.non_persistent[0].also_stored);
  EXPECT_THAT(Text(report),
              HasSubstr("non-persistent buffers (1):\n  model.rotary_emb.inv_freq [4] F32: never read "
                        "from a checkpoint; computed on load by rope_inv_freq(base=10000,dim=8)\n"));
}

TEST(MatchTest, NonPersistentBufferStoredByAnOlderVersionIsIgnored) {
  Skeleton s = LlamaLikeSkeleton(1);
  Checkpoint ckpt = CheckpointFor(s);
  AddStored(ckpt, "model.rotary_emb.inv_freq", {4}, DType::kF32);
  SkeletonTensor inv_freq = MakeTensor("model.rotary_emb.inv_freq", {4}, DType::kF32);
  inv_freq.is_buffer = true;
  inv_freq.persistent = false;
  s.tensors.push_back(inv_freq);
  const MatchReport report = MatchSkeleton(s, ckpt);
  EXPECT_TRUE(report.unexpected.empty());
  ASSERT_EQ(report.non_persistent.size(), 1u);
  EXPECT_TRUE(report.non_persistent[0].also_stored);
  EXPECT_THAT(Text(report),
              HasSubstr("the skeleton gives no init rule, so the model must compute it itself (the "
                        "checkpoint's copy, from an older version, is ignored)"));
}

TEST(MatchTest, DifferentArchitectureIsDiagnosed) {
  const Skeleton s = LlamaLikeSkeleton(1);
  Checkpoint ckpt;
  ckpt.files = {"model.safetensors"};
  for (const char* name :
       {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.attn.c_attn.weight",
        "transformer.h.0.mlp.c_fc.weight", "transformer.ln_f.weight"}) {
    AddStored(ckpt, name, {16});
  }
  const MatchReport report = MatchSkeleton(s, ckpt);
  EXPECT_TRUE(report.different_architecture);
  EXPECT_FALSE(report.prefix_hint.has_value());
  EXPECT_THAT(
      Text(report),
      HasSubstr("diagnosis (1):\n  the checkpoint looks like a different architecture: 5 of 5 checkpoint "
                "tensors are not in the skeleton, and 12 of 12 skeleton tensors are not in the checkpoint\n"
                "    fix: use the model class that matches the checkpoint"));
  EXPECT_THAT(Text(report), ::testing::EndsWith("verdict: 12 tensors would stay on meta\n"));
}

TEST(MatchTest, AFewUnknownExtrasAreNotADifferentArchitecture) {
  const Skeleton s = LlamaLikeSkeleton(1);
  Checkpoint ckpt = CheckpointFor(s);
  AddStored(ckpt, "vision_tower.weight", {16});
  EXPECT_FALSE(MatchSkeleton(s, ckpt).different_architecture);
}

TEST(MatchTest, WrapperPrefixIsFound) {
  const Skeleton s = LlamaLikeSkeleton(1);
  Checkpoint ckpt = CheckpointFor(s);
  for (TensorLayout& t : ckpt.tensors) t.name = "module." + t.name;
  ckpt.BuildIndex();
  const MatchReport report = MatchSkeleton(s, ckpt);
  ASSERT_TRUE(report.prefix_hint.has_value());
  EXPECT_EQ(report.prefix_hint->prefix, "module.");
  EXPECT_TRUE(report.prefix_hint->checkpoint_has_it);
  EXPECT_EQ(report.prefix_hint->matched, s.tensors.size());
  EXPECT_THAT(Text(report),
              HasSubstr("12 checkpoint names are skeleton names with the prefix \"module.\" added: the "
                        "model was saved from a wrapper"));
}

TEST(MatchTest, BaseModelCheckpointLacksThePrefix) {
  const Skeleton s = LlamaLikeSkeleton(1);
  Checkpoint ckpt = CheckpointFor(s);
  RemoveStored(ckpt, "lm_head.weight");
  for (TensorLayout& t : ckpt.tensors) t.name = t.name.substr(std::string("model.").size());
  ckpt.BuildIndex();
  const MatchReport report = MatchSkeleton(s, ckpt);
  ASSERT_TRUE(report.prefix_hint.has_value());
  EXPECT_EQ(report.prefix_hint->prefix, "model.");
  EXPECT_FALSE(report.prefix_hint->checkpoint_has_it);
  EXPECT_EQ(report.prefix_hint->matched, s.tensors.size() - 1);
}

TEST(MatchTest, IndexOnlyComparesNamesAndSaysShapesWereNotChecked) {
  Skeleton s = TiedLlama();
  s.tensors.push_back(MakeTensor("score.weight", {2, 16}));
  CheckpointIndex index;
  index.path = "/ckpt/model.safetensors.index.json";
  for (const TensorLayout& t : CheckpointFor(TiedLlama()).tensors)
    index.weight_map[t.name] = "model-1.safetensors";
  index.weight_map["model.layers.0.self_attn.rotary_emb.inv_freq"] = "model-1.safetensors";
  const MatchReport report = MatchSkeletonNames(s, index);
  EXPECT_FALSE(report.shapes_checked);
  EXPECT_THAT(report.missing, ElementsAre("score.weight"));
  EXPECT_TRUE(report.shape_mismatches.empty());
  EXPECT_THAT(report.unexpected, ElementsAre("model.layers.0.self_attn.rotary_emb.inv_freq"));
  const std::string text = Text(report);
  EXPECT_THAT(text, HasSubstr("\nnote: shapes and dtypes not checked: only the index is present\n"));
  EXPECT_THAT(text,
              ::testing::EndsWith("verdict: 1 tensor would stay on meta (shapes and dtypes not checked)\n"));

  s.tensors.pop_back();
  EXPECT_EQ(CheckVerdict(MatchSkeletonNames(s, index), true),
            absl::StrCat(kOkVerdict, " (1 unexpected tensor ignored; shapes and dtypes not checked)"));
}

// TiedLlama's stored tensors over two shards: the embedding alone in model-2.
CheckpointIndex TwoShardIndex() {
  CheckpointIndex index;
  index.path = "/ckpt/model.safetensors.index.json";
  for (const TensorLayout& t : CheckpointFor(TiedLlama()).tensors) {
    index.weight_map[t.name] =
        t.name == "model.embed_tokens.weight" ? "model-2.safetensors" : "model-1.safetensors";
  }
  return index;
}

TEST(MatchTest, PartialDownloadNamesTheAbsentShardAndTheTensorsItHolds) {
  const MatchReport report =
      MatchSkeletonPartialDownload(TiedLlama(), TwoShardIndex(), {"model-2.safetensors"});
  EXPECT_FALSE(report.shapes_checked);
  EXPECT_EQ(report.names_only_reason, "1 of 2 shards is not in the folder");
  EXPECT_TRUE(report.WouldStayMeta());
  EXPECT_THAT(report.missing, ElementsAre("model.embed_tokens.weight"));
  ASSERT_EQ(report.absent_shards.size(), 1u);
  EXPECT_EQ(report.absent_shards[0].file, "model-2.safetensors");
  EXPECT_THAT(report.absent_shards[0].tensors, ElementsAre("model.embed_tokens.weight"));
  // The tied alias lm_head.weight goes with the embedding's shard: one finding, naming it.
  EXPECT_THAT(WouldStayMetaFindings(report),
              ElementsAre("model.embed_tokens.weight is in shard model-2.safetensors, which is not in the "
                          "checkpoint's folder (the index names it)"));
  const std::string text = Text(report);
  EXPECT_THAT(text,
              HasSubstr("    fix: download model-2.safetensors: the download is incomplete (1 of 2 shards "
                        "the index names is not in the folder)\n"));
  EXPECT_THAT(text,
              HasSubstr("  1 of 2 shards the index names is not in the folder: model-2.safetensors, holding "
                        "1 tensor. The download is incomplete"));
  EXPECT_THAT(text,
              ::testing::EndsWith("verdict: 1 tensor would stay on meta: 1 of 2 shards the index names is "
                                  "not in the folder (shapes and dtypes not checked)\n"));
}

TEST(MatchTest, PartialDownloadIsNeverOkEvenWhenTheSkeletonNeedsNothingOfTheAbsentShard) {
  CheckpointIndex index = TwoShardIndex();
  index.weight_map["extra.weight"] = "model-3.safetensors";
  const MatchReport report = MatchSkeletonPartialDownload(TiedLlama(), index, {"model-3.safetensors"});
  EXPECT_TRUE(report.missing.empty());
  EXPECT_TRUE(report.WouldStayMeta());
  EXPECT_THAT(CheckVerdict(report, true),
              HasSubstr("verdict: the checkpoint cannot be loaded: 1 of 3 shards"));
  const nlohmann::json json = nlohmann::json::parse(CheckReportToJson(report, {"model.json", "/ckpt", "m"}));
  EXPECT_FALSE(json["verdict"]["ok"].get<bool>());
  EXPECT_EQ(json["diagnosis"][0]["problem"], "absent_shards");
  EXPECT_EQ(json["diagnosis"][0]["tensors"], nlohmann::json::array({"extra.weight"}));
}

TEST(MatchTest, StatusNamesTwentyThenCounts) {
  const Skeleton s = LlamaLikeSkeleton(3);
  Checkpoint ckpt = CheckpointFor(s);
  ckpt.tensors.resize(2);
  ckpt.BuildIndex();
  const absl::Status status = MatchToStatus(MatchSkeleton(s, ckpt), "m");
  EXPECT_THAT(std::string(status.message()), HasSubstr("; and 8 more; fix: "));
}

TEST(CheckReportTest, JsonCarriesEveryFindingWithItsFix) {
  Skeleton s = TiedLlama();
  s.tensors.push_back(MakeTensor("score.weight", {2, 16}));
  Checkpoint ckpt = CheckpointFor(TiedLlama());
  RenameStored(ckpt, "model.embed_tokens.weight", "lm_head.weight");
  RemoveStored(ckpt, "model.norm.weight");
  AddStored(ckpt, "model.norm.weight", {16}, DType::kF32);
  AddStored(ckpt, "model.layers.0.mlp.up_proj.SCB", {32}, DType::kF32);
  const std::string text = CheckReportToJson(MatchSkeleton(s, ckpt), {"model.json", "/ckpt", "llama-test"});
  const nlohmann::json json = nlohmann::json::parse(text);
  EXPECT_EQ(json["format"], "metaload.check/1");
  EXPECT_EQ(json["skeleton"], "model.json");
  EXPECT_EQ(json["checkpoint"], "/ckpt");
  EXPECT_EQ(json["shapes_checked"], true);
  EXPECT_FALSE(json.contains("note"));
  ASSERT_EQ(json["would_stay_meta"].size(), 1u);
  EXPECT_EQ(json["would_stay_meta"][0]["tensor"], "score.weight");
  EXPECT_EQ(json["would_stay_meta"][0]["problem"], "missing");
  EXPECT_EQ(json["would_stay_meta"][0]["message"],
            "score.weight is in the skeleton but not in the checkpoint");
  EXPECT_THAT(json["would_stay_meta"][0]["fix"].get<std::string>(), HasSubstr("--init-missing"));
  EXPECT_EQ(json["dtype_mismatches"][0]["checkpoint_dtype"], "F32");
  EXPECT_EQ(json["unexpected"][0]["kind"], "bitsandbytes-8bit");
  EXPECT_EQ(json["unexpected"][0]["tensors"], nlohmann::json({"model.layers.0.mlp.up_proj.SCB"}));
  EXPECT_EQ(json["tied"][0]["resolution"], "alias");
  EXPECT_EQ(json["tied"][0]["read_from"], "lm_head.weight");
  EXPECT_EQ(json["verdict"]["ok"], false);
  EXPECT_EQ(json["verdict"]["would_stay_meta"], 1);
  EXPECT_EQ(json["verdict"]["unexpected"], 1);
  EXPECT_EQ(json["verdict"]["line"], "verdict: 1 tensor would stay on meta");
  EXPECT_THAT(text, Not(HasSubstr("\n\n")));
}

}  // namespace
}  // namespace metaload
