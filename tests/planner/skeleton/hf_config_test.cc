// SkeletonFromHfConfig: against every real config + checkpoint index in the fixtures (names
// and bytes), against a real save_pretrained header (names, shapes, dtypes), and the
// per-architecture details (ties, biases, fused and transposed weights, old Falcon keys, RoPE
// rules). Errors, LooksLikeHfConfig and scale: hf_config_errors_test.cc.
#include "planner/skeleton/hf/hf_config.h"

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/format/checkpoint.h"
#include "planner/format/safetensors.h"
#include "planner/skeleton/skeleton.h"
#include "tests/planner/skeleton/hf_test_configs.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

namespace fs = std::filesystem;
using ::metaload::testing::ErrorOf;
using ::metaload::testing::FromJson;
using ::metaload::testing::PersistentBytes;
using ::metaload::testing::PersistentNames;
using ::metaload::testing::ShapeOf;
using ::metaload::testing::TinyFalcon;
using ::metaload::testing::TinyLlama;
using ::metaload::testing::WithArchitecture;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------------------
// Real configs and indexes (tests/fixtures/hf/*).

// Where a skeleton cannot equal its checkpoint, and why. Everything else must match exactly.
struct KnownDifference {
  std::string case_name;
  std::set<std::string> only_in_index;
  std::string why;
};

const std::vector<KnownDifference>& KnownDifferences() {
  static const auto* const kDifferences = new std::vector<KnownDifference>{
      {"falcon-180b-chat",
       {"lm_head.weight"},
       "the config has no tie_word_embeddings and FalconConfig defaults it to true, so the config "
       "describes lm_head as an alias of transformer.word_embeddings; the checkpoint nevertheless "
       "stores its own lm_head (total_size counts it), which transformers >= 5 loads untied when "
       "the values differ"},
  };
  return *kDifferences;
}

TEST(HfConfigFixturesTest, EveryCaseMatchesItsIndexNamesAndTotalSize) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  const fs::path root = fs::path(fixtures) / "hf";
  if (!fs::is_directory(root)) GTEST_SKIP() << root << " not found";
  std::vector<fs::path> cases;
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) cases.push_back(entry.path());
  }
  std::sort(cases.begin(), cases.end());
  ASSERT_GE(cases.size(), 7u);
  int indexes_checked = 0;
  for (const fs::path& dir : cases) {
    const std::string case_name = dir.filename().string();
    SCOPED_TRACE(case_name);
    absl::StatusOr<Skeleton> skeleton = SkeletonFromHfConfigFile((dir / "config.json").string());
    ASSERT_TRUE(skeleton.ok()) << skeleton.status();
    // What we build must be a valid skeleton file, too.
    ASSERT_TRUE(ParseSkeletonJson(SkeletonToJson(*skeleton), "round trip").ok());
    const KnownDifference* known = nullptr;
    for (const KnownDifference& difference : KnownDifferences()) {
      if (difference.case_name == case_name) known = &difference;
    }
    for (const char* index_name : {"model.safetensors.index.json", "pytorch_model.bin.index.json"}) {
      if (!fs::exists(dir / index_name)) continue;
      SCOPED_TRACE(index_name);
      absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex((dir / index_name).string());
      ASSERT_TRUE(index.ok()) << index.status();
      ++indexes_checked;
      std::set<std::string> expected_names;
      for (const auto& [name, file] : index->weight_map) expected_names.insert(name);
      uint64_t expected_bytes = static_cast<uint64_t>(index->total_size_bytes);
      if (known != nullptr) {
        for (const std::string& name : known->only_in_index) {
          ASSERT_EQ(expected_names.erase(name), 1u)
              << name << " was expected only in the index; " << known->why;
          // The index holds a full copy of what the skeleton ties: the embeddings' size.
          for (const std::vector<std::string>& group : skeleton->tied_groups) {
            if (std::find(group.begin(), group.end(), name) != group.end()) {
              expected_bytes -= skeleton->Find(group[0])->size_bytes();
            }
          }
        }
      }
      const std::vector<std::string> names = PersistentNames(*skeleton);
      const std::set<std::string> actual_names(names.begin(), names.end());
      std::vector<std::string> only_in_skeleton, only_in_index;
      std::set_difference(actual_names.begin(), actual_names.end(), expected_names.begin(),
                          expected_names.end(), std::back_inserter(only_in_skeleton));
      std::set_difference(expected_names.begin(), expected_names.end(), actual_names.begin(),
                          actual_names.end(), std::back_inserter(only_in_index));
      EXPECT_TRUE(only_in_skeleton.empty())
          << "only in the skeleton: " << absl::StrJoin(only_in_skeleton, ", ");
      EXPECT_TRUE(only_in_index.empty()) << "only in the index: " << absl::StrJoin(only_in_index, ", ");
      EXPECT_EQ(names.size(), actual_names.size()) << "a name repeats in the skeleton";
      EXPECT_EQ(PersistentBytes(*skeleton), expected_bytes);
    }
  }
  EXPECT_GE(indexes_checked, 8);
}

TEST(HfConfigFixturesTest, Gpt2ConfigEqualsSavePretrainedHeaderExactly) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  const fs::path dir = fs::path(fixtures) / "safetensors" / "st_gpt2-1L-16d_tiny-llm-cicd_f32";
  if (!fs::is_directory(dir)) GTEST_SKIP() << dir << " not found";
  absl::StatusOr<Skeleton> skeleton = SkeletonFromHfConfigFile((dir / "config.json").string());
  ASSERT_TRUE(skeleton.ok()) << skeleton.status();
  absl::StatusOr<SafetensorsFile> header =
      ReadSafetensorsFile((dir / "model.safetensors").string(), "model.safetensors");
  ASSERT_TRUE(header.ok()) << header.status();
  std::map<std::string, std::pair<std::vector<int64_t>, DType>> expected, actual;
  for (const TensorLayout& t : header->tensors) expected[t.name] = {t.shape, t.dtype};
  for (const SkeletonTensor& t : skeleton->tensors) {
    ASSERT_TRUE(t.persistent) << t.name << ": GPT-2 has no non-persistent buffers in transformers 5";
    actual[t.name] = {t.shape, t.dtype};
  }
  EXPECT_EQ(actual, expected);
  EXPECT_EQ(skeleton->tied_groups,
            (std::vector<std::vector<std::string>>{{"transformer.wte.weight", "lm_head.weight"}}));
}

TEST(HfConfigFixturesTest, Llama31RopeRuleCarriesLlama3Scaling) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  const fs::path config = fs::path(fixtures) / "hf" / "llama3.1-8b_modelstock" / "config.json";
  if (!fs::exists(config)) GTEST_SKIP() << config << " not found";
  absl::StatusOr<Skeleton> skeleton = SkeletonFromHfConfigFile(config.string());
  ASSERT_TRUE(skeleton.ok()) << skeleton.status();
  const SkeletonTensor* inv_freq = skeleton->Find("model.rotary_emb.inv_freq");
  ASSERT_NE(inv_freq, nullptr);
  EXPECT_TRUE(inv_freq->is_buffer);
  EXPECT_FALSE(inv_freq->persistent);
  EXPECT_EQ(inv_freq->dtype, DType::kF32);
  EXPECT_THAT(inv_freq->shape, ElementsAre(64));
  EXPECT_EQ(inv_freq->init,
            "rope_inv_freq(base=500000,dim=128,scaling=llama3(factor=8,low_freq_factor=1,high_freq_factor=4,"
            "original_max_position_embeddings=8192))");
  EXPECT_EQ(skeleton->model, "llama3.1-8b_modelstock");
  EXPECT_EQ(skeleton->architecture, "LlamaForCausalLM");
}

TEST(HfConfigFixturesTest, EveryRealConfigCarriesItsAttentionGeometry) {
  METALOAD_REQUIRE_FIXTURES(fixtures);
  // {heads, key/value heads, head size} as each config says (Falcon-180B: 14848 / 232 = 64;
  // Gemma-2B: multi-query, head_dim 256; Phi-3: no grouped-query attention).
  const std::map<std::string, AttentionGeometry> expected = {
      {"falcon-180b-chat", {232, 8, 64}},         {"gemma-2b-it", {8, 1, 256}},
      {"llama3.1-8b_modelstock", {32, 8, 128}},   {"mistral-7b-v0.1_fp32_bin-index", {32, 8, 128}},
      {"mixtral-8x7b_dolphin2.5", {32, 8, 128}},  {"phi3-mini-3.8b_slerp", {32, 32, 96}},
      {"qwen2.5-3b_tied_finetune", {16, 2, 128}},
  };
  for (const auto& [case_name, attention] : expected) {
    const fs::path config = fs::path(fixtures) / "hf" / case_name / "config.json";
    if (!fs::exists(config)) GTEST_SKIP() << config << " not found";
    absl::StatusOr<Skeleton> skeleton = SkeletonFromHfConfigFile(config.string());
    ASSERT_TRUE(skeleton.ok()) << skeleton.status();
    ASSERT_TRUE(skeleton->attention.has_value()) << case_name;
    EXPECT_EQ(*skeleton->attention, attention) << case_name;
  }
}

// ---------------------------------------------------------------------------------------------
// Structure shared by all: order, modules, ties.

TEST(HfConfigTest, TensorsComeInModuleDefinitionOrder) {
  Skeleton s = FromJson(TinyLlama());
  std::vector<std::string> names;
  for (const SkeletonTensor& t : s.tensors) names.push_back(t.name);
  const std::vector<std::string> layer0 = {
      "model.layers.0.self_attn.q_proj.weight",        "model.layers.0.self_attn.k_proj.weight",
      "model.layers.0.self_attn.v_proj.weight",        "model.layers.0.self_attn.o_proj.weight",
      "model.layers.0.mlp.gate_proj.weight",           "model.layers.0.mlp.up_proj.weight",
      "model.layers.0.mlp.down_proj.weight",           "model.layers.0.input_layernorm.weight",
      "model.layers.0.post_attention_layernorm.weight"};
  ASSERT_EQ(names.size(), 1 + 2 * layer0.size() + 1 + 2 + 1);
  EXPECT_EQ(names.front(), "model.embed_tokens.weight");
  EXPECT_EQ(std::vector<std::string>(names.begin() + 1, names.begin() + 10), layer0);
  EXPECT_EQ(names[10], "model.layers.1.self_attn.q_proj.weight");
  EXPECT_THAT(std::vector<std::string>(names.end() - 4, names.end()),
              ElementsAre("model.norm.weight", "model.rotary_emb.inv_freq",
                          "model.rotary_emb.original_inv_freq", "lm_head.weight"));
  EXPECT_THAT(ShapeOf(s, "model.layers.0.self_attn.k_proj.weight"), ElementsAre(32, 64));
  EXPECT_EQ(s.Find("model.layers.0.mlp.up_proj.weight")->dtype, DType::kBF16);
}

TEST(HfConfigTest, DecoderLayersAreNoSplitModulesNamedByTheirClass) {
  Skeleton s = FromJson(TinyLlama());
  ASSERT_EQ(s.modules.size(), 3u);
  EXPECT_EQ(s.modules[0].path, "");
  EXPECT_EQ(s.modules[0].type, "LlamaForCausalLM");
  EXPECT_FALSE(s.modules[0].no_split);
  EXPECT_EQ(s.modules[2].path, "model.layers.1");
  EXPECT_EQ(s.modules[2].type, "LlamaDecoderLayer");
  EXPECT_TRUE(s.modules[2].no_split);
  EXPECT_EQ(s.model, "m");
}

TEST(HfConfigTest, TieDefaultsFollowEachConfigClass) {
  const std::map<std::string, bool> tied_by_default = {
      {"LlamaForCausalLM", false}, {"MistralForCausalLM", false}, {"MixtralForCausalLM", false},
      {"Qwen2ForCausalLM", false}, {"GemmaForCausalLM", true},    {"Phi3ForCausalLM", false}};
  for (const auto& [architecture, tied] : tied_by_default) {
    SCOPED_TRACE(architecture);
    Skeleton s = FromJson(WithArchitecture(TinyLlama(), architecture));
    EXPECT_EQ(s.Find("lm_head.weight") == nullptr, tied);
    EXPECT_EQ(s.tied_groups.size(), tied ? 1u : 0u);
    nlohmann::json flipped = WithArchitecture(TinyLlama(), architecture);
    flipped["tie_word_embeddings"] = !tied;
    Skeleton t = FromJson(flipped);
    EXPECT_EQ(t.Find("lm_head.weight") == nullptr, !tied);
  }
  Skeleton tied = FromJson(WithArchitecture(TinyLlama(), "GemmaForCausalLM"));
  EXPECT_EQ(tied.tied_groups,
            (std::vector<std::vector<std::string>>{{"model.embed_tokens.weight", "lm_head.weight"}}));
}

TEST(HfConfigTest, DtypeFromDtypeOrTorchDtypeElseF32) {
  nlohmann::json config = TinyLlama();
  config.erase("torch_dtype");
  EXPECT_EQ(FromJson(config).tensors[0].dtype, DType::kF32);
  config["dtype"] = "float16";
  EXPECT_EQ(FromJson(config).tensors[0].dtype, DType::kF16);
  config.erase("dtype");
  config["torch_dtype"] = "float32";
  EXPECT_EQ(FromJson(config).tensors[0].dtype, DType::kF32);
  // Rotary buffers are float32 whatever the parameters' dtype.
  EXPECT_EQ(FromJson(TinyLlama()).Find("model.rotary_emb.inv_freq")->dtype, DType::kF32);
}

TEST(HfConfigTest, NestedTextConfigSuppliesTheSizes) {
  nlohmann::json text = TinyLlama();
  text.erase("architectures");
  text.erase("torch_dtype");
  nlohmann::json config = {
      {"architectures", {"MistralForCausalLM"}}, {"text_config", text}, {"dtype", "bfloat16"}};
  Skeleton s = FromJson(config);
  EXPECT_THAT(ShapeOf(s, "model.embed_tokens.weight"), ElementsAre(128, 64));
  EXPECT_NE(s.Find("model.layers.1.mlp.down_proj.weight"), nullptr);
  EXPECT_EQ(s.tensors[0].dtype, DType::kBF16);
  config["text_config"]["hidden_size"] = "wide";
  EXPECT_THAT(std::string(ErrorOf(config).message()), HasSubstr("\"text_config.hidden_size\""));
}

TEST(HfConfigTest, ArchitectureFromModelTypeWhenArchitecturesIsAbsent) {
  nlohmann::json config = TinyLlama();
  config.erase("architectures");
  config["model_type"] = "qwen2";
  Skeleton s = FromJson(config);
  EXPECT_EQ(s.architecture, "Qwen2ForCausalLM");
  EXPECT_NE(s.Find("model.layers.0.self_attn.q_proj.bias"), nullptr);
}

// ---------------------------------------------------------------------------------------------
// Per-architecture details.

TEST(HfConfigTest, HeadDimWhenGivenOverridesHiddenOverHeads) {
  nlohmann::json config = TinyLlama();
  config["head_dim"] = 24;
  Skeleton s = FromJson(config);
  EXPECT_THAT(ShapeOf(s, "model.layers.0.self_attn.q_proj.weight"), ElementsAre(96, 64));
  EXPECT_THAT(ShapeOf(s, "model.layers.0.self_attn.o_proj.weight"), ElementsAre(64, 96));
  EXPECT_THAT(ShapeOf(s, "model.rotary_emb.inv_freq"), ElementsAre(12));
  config["head_dim"] = nullptr;  // transformers treats null as absent
  EXPECT_THAT(ShapeOf(FromJson(config), "model.layers.0.self_attn.q_proj.weight"), ElementsAre(64, 64));
}

TEST(HfConfigTest, GemmaDefaultsHeadDim256AndKeepsEmbedScaleBuffer) {
  nlohmann::json config = WithArchitecture(TinyLlama(), "GemmaForCausalLM");
  Skeleton s = FromJson(config);
  EXPECT_THAT(ShapeOf(s, "model.layers.0.self_attn.q_proj.weight"), ElementsAre(4 * 256, 64));
  const SkeletonTensor* scale = s.Find("model.embed_tokens.embed_scale");
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(&s.tensors[1], scale);  // a buffer of embed_tokens, right after its weight
  EXPECT_TRUE(scale->shape.empty());
  EXPECT_EQ(scale->dtype, DType::kBF16);
  EXPECT_FALSE(scale->persistent);
  EXPECT_EQ(scale->init, "constant(value=8)");
}

TEST(HfConfigTest, LlamaAttentionAndMlpBiasFollowTheirKeys) {
  nlohmann::json config = TinyLlama();
  config["attention_bias"] = true;
  Skeleton s = FromJson(config);
  for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
    EXPECT_NE(s.Find(absl::StrCat("model.layers.0.self_attn.", proj, ".bias")), nullptr) << proj;
  }
  EXPECT_EQ(s.Find("model.layers.0.mlp.up_proj.bias"), nullptr);
  config["mlp_bias"] = true;
  EXPECT_THAT(ShapeOf(FromJson(config), "model.layers.0.mlp.gate_proj.bias"), ElementsAre(96));
}

TEST(HfConfigTest, Qwen2HasQkvBiasesButNoOutputBias) {
  Skeleton s = FromJson(WithArchitecture(TinyLlama(), "Qwen2ForCausalLM"));
  EXPECT_THAT(ShapeOf(s, "model.layers.0.self_attn.k_proj.bias"), ElementsAre(32));
  EXPECT_EQ(s.Find("model.layers.0.self_attn.o_proj.bias"), nullptr);
}

TEST(HfConfigTest, Phi3FusesQkvAndGateUpAfterOProj) {
  Skeleton s = FromJson(WithArchitecture(TinyLlama(), "Phi3ForCausalLM"));
  EXPECT_EQ(s.tensors[1].name, "model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(s.tensors[2].name, "model.layers.0.self_attn.qkv_proj.weight");
  EXPECT_THAT(s.tensors[2].shape, ElementsAre(64 + 2 * 32, 64));
  EXPECT_THAT(ShapeOf(s, "model.layers.0.mlp.gate_up_proj.weight"), ElementsAre(192, 64));
  EXPECT_EQ(s.Find("model.layers.0.mlp.up_proj.weight"), nullptr);
}

TEST(HfConfigTest, MixtralExpertsInCheckpointLayout) {
  nlohmann::json config = WithArchitecture(TinyLlama(), "MixtralForCausalLM");
  config["num_local_experts"] = 4;
  Skeleton s = FromJson(config);
  EXPECT_EQ(s.tensors[5].name, "model.layers.0.block_sparse_moe.gate.weight");
  EXPECT_THAT(s.tensors[5].shape, ElementsAre(4, 64));
  EXPECT_EQ(s.tensors[6].name, "model.layers.0.block_sparse_moe.experts.0.w1.weight");
  EXPECT_THAT(ShapeOf(s, "model.layers.0.block_sparse_moe.experts.3.w2.weight"), ElementsAre(64, 96));
  EXPECT_THAT(ShapeOf(s, "model.layers.0.block_sparse_moe.experts.3.w3.weight"), ElementsAre(96, 64));
  EXPECT_EQ(s.Find("model.layers.0.block_sparse_moe.experts.4.w1.weight"), nullptr);
  EXPECT_EQ(s.Find("model.layers.0.mlp.gate_proj.weight"), nullptr);
  // Mixtral's default rope_theta is 1e6, not 10000.
  EXPECT_THAT(s.Find("model.rotary_emb.inv_freq")->init, HasSubstr("base=1000000,"));
}

TEST(HfConfigTest, FalconFusedQkvFollowsTheAttentionKind) {
  // Multi-query (the default): all query heads, one key and one value head.
  Skeleton mq = FromJson(TinyFalcon());
  EXPECT_THAT(ShapeOf(mq, "transformer.h.0.self_attention.query_key_value.weight"),
              ElementsAre(64 + 2 * 16, 64));
  EXPECT_NE(mq.Find("transformer.h.0.input_layernorm.bias"), nullptr);
  EXPECT_EQ(mq.Find("transformer.h.0.ln_attn.weight"), nullptr);
  EXPECT_EQ(mq.tied_groups.size(), 1u);  // FalconConfig ties by default
  nlohmann::json config = TinyFalcon();
  config["multi_query"] = false;
  EXPECT_THAT(ShapeOf(FromJson(config), "transformer.h.0.self_attention.query_key_value.weight"),
              ElementsAre(3 * 64, 64));
  config["new_decoder_architecture"] = true;
  config["num_kv_heads"] = 2;
  config["bias"] = true;
  Skeleton grouped = FromJson(config);
  EXPECT_THAT(ShapeOf(grouped, "transformer.h.0.self_attention.query_key_value.bias"),
              ElementsAre((4 + 4) * 16));
  EXPECT_NE(grouped.Find("transformer.h.0.ln_mlp.weight"), nullptr);
  EXPECT_EQ(grouped.Find("transformer.h.0.input_layernorm.weight"), nullptr);
  EXPECT_NE(grouped.Find("transformer.h.0.mlp.dense_4h_to_h.bias"), nullptr);
}

TEST(HfConfigTest, FalconSequentialAttentionHasTwoNormsPostFirst) {
  nlohmann::json config = TinyFalcon();
  config["parallel_attn"] = false;
  Skeleton s = FromJson(config);
  EXPECT_EQ(s.tensors[5].name, "transformer.h.0.post_attention_layernorm.weight");
  EXPECT_EQ(s.tensors[7].name, "transformer.h.0.input_layernorm.weight");
}

TEST(HfConfigTest, RefinedWebKeysReadAsFalcon) {
  // Falcon-7B's original config (RefinedWebModel): n_head, n_layer, multi-query.
  nlohmann::json rw7 = {{"architectures", {"RWForCausalLM"}},
                        {"model_type", "RefinedWebModel"},
                        {"hidden_size", 64},
                        {"n_head", 4},
                        {"n_layer", 2},
                        {"multi_query", true},
                        {"parallel_attn", true},
                        {"bias", false},
                        {"alibi", false},
                        {"vocab_size", 128}};
  Skeleton s7 = FromJson(rw7);
  EXPECT_EQ(s7.architecture, "FalconForCausalLM");
  EXPECT_THAT(ShapeOf(s7, "transformer.h.1.self_attention.query_key_value.weight"), ElementsAre(96, 64));
  EXPECT_NE(s7.Find("transformer.h.1.input_layernorm.weight"), nullptr);
  // Falcon-40B's (RefinedWeb): n_head_kv implies the new decoder architecture.
  nlohmann::json rw40 = rw7;
  rw40["model_type"] = "RefinedWeb";
  rw40.erase("multi_query");
  rw40["n_head_kv"] = 2;
  rw40["n_embed"] = 64;
  rw40.erase("hidden_size");
  Skeleton s40 = FromJson(rw40);
  EXPECT_THAT(ShapeOf(s40, "transformer.h.0.self_attention.query_key_value.weight"), ElementsAre(128, 64));
  EXPECT_NE(s40.Find("transformer.h.0.ln_attn.bias"), nullptr);
}

TEST(HfConfigTest, AttentionGeometryOfEachArchitecture) {
  for (const char* architecture : {"LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM",
                                   "Qwen2ForCausalLM", "Phi3ForCausalLM"}) {
    Skeleton s = FromJson(WithArchitecture(TinyLlama(), architecture));
    ASSERT_TRUE(s.attention.has_value()) << architecture;
    EXPECT_EQ(*s.attention, (AttentionGeometry{4, 2, 16})) << architecture;
  }
  EXPECT_EQ(FromJson(WithArchitecture(TinyLlama(), "GemmaForCausalLM")).attention,
            (AttentionGeometry{4, 2, 256}));
  // Falcon: multi-query shares one key/value head; without it, one per query head (FalconAttention
  // ignores num_kv_heads then); the new decoder architecture groups num_kv_heads.
  nlohmann::json falcon = TinyFalcon();
  falcon["num_kv_heads"] = 2;
  EXPECT_EQ(FromJson(falcon).attention, (AttentionGeometry{4, 1, 16}));
  falcon["multi_query"] = false;
  EXPECT_EQ(FromJson(falcon).attention, (AttentionGeometry{4, 4, 16}));
  falcon["new_decoder_architecture"] = true;
  EXPECT_EQ(FromJson(falcon).attention, (AttentionGeometry{4, 2, 16}));
  const nlohmann::json gpt2 = {{"architectures", {"GPT2LMHeadModel"}},
                               {"n_embd", 32},
                               {"n_layer", 1},
                               {"n_head", 4},
                               {"vocab_size", 100}};
  EXPECT_EQ(FromJson(gpt2).attention, (AttentionGeometry{4, 4, 8}));
}

TEST(HfConfigTest, Gpt2WeightsAreTransposedConv1D) {
  nlohmann::json config = {{"architectures", {"GPT2LMHeadModel"}},
                           {"n_embd", 32},
                           {"n_layer", 1},
                           {"n_head", 4},
                           {"vocab_size", 100}};
  Skeleton s = FromJson(config);
  EXPECT_THAT(ShapeOf(s, "transformer.h.0.attn.c_attn.weight"), ElementsAre(32, 96));
  EXPECT_THAT(ShapeOf(s, "transformer.h.0.mlp.c_fc.weight"), ElementsAre(32, 128));
  EXPECT_THAT(ShapeOf(s, "transformer.h.0.mlp.c_proj.weight"), ElementsAre(128, 32));
  EXPECT_THAT(ShapeOf(s, "transformer.wpe.weight"), ElementsAre(1024, 32));
  EXPECT_EQ(s.Find("transformer.h.0.attn.bias"), nullptr);
  config["n_inner"] = 40;
  config["add_cross_attention"] = true;
  Skeleton cross = FromJson(config);
  EXPECT_THAT(ShapeOf(cross, "transformer.h.0.mlp.c_fc.weight"), ElementsAre(32, 40));
  EXPECT_THAT(ShapeOf(cross, "transformer.h.0.crossattention.c_attn.weight"), ElementsAre(32, 64));
  EXPECT_THAT(ShapeOf(cross, "transformer.h.0.crossattention.q_attn.weight"), ElementsAre(32, 32));
  EXPECT_NE(cross.Find("transformer.h.0.ln_cross_attn.bias"), nullptr);
}

// ---------------------------------------------------------------------------------------------
// RoPE init rules (grammar and formulas: docs/skeleton-format.md).

std::string InvFreqRule(const nlohmann::json& config) {
  Skeleton s = FromJson(config);
  const SkeletonTensor* t = s.Find("model.rotary_emb.inv_freq");
  return t == nullptr ? "" : t->init;
}

TEST(HfConfigTest, RopeRulesForEachScalingType) {
  nlohmann::json config = TinyLlama();
  EXPECT_EQ(InvFreqRule(config), "rope_inv_freq(base=10000,dim=16)");
  config["rope_theta"] = 500000.0;
  config["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(InvFreqRule(config), "rope_inv_freq(base=500000,dim=16,scaling=linear(factor=2))");
  config["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 1.5}};
  EXPECT_EQ(InvFreqRule(config), "rope_inv_freq(base=500000,dim=16,scaling=dynamic(factor=1.5))");
  config["max_position_embeddings"] = 8192;
  config["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 2048}};
  EXPECT_EQ(InvFreqRule(config),
            "rope_inv_freq(base=500000,dim=16,scaling=yarn(factor=4,original_max_position_embeddings=2048,"
            "beta_fast=32,beta_slow=1,truncate=true))");
  // transformers 5's form: everything inside rope_parameters.
  config.erase("rope_scaling");
  config.erase("rope_theta");
  config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  EXPECT_EQ(InvFreqRule(config), "rope_inv_freq(base=1000000,dim=16)");
}

TEST(HfConfigTest, Phi3LongropeUsesShortFactorAndPartialRotaryFactor) {
  nlohmann::json config = WithArchitecture(TinyLlama(), "Phi3ForCausalLM");
  config["partial_rotary_factor"] = 0.5;
  EXPECT_EQ(InvFreqRule(config), "rope_inv_freq(base=10000,dim=8)");
  config["rope_scaling"] = {
      {"type", "su"}, {"short_factor", {1.0, 1.5, 2.0, 2.5}}, {"long_factor", {1, 2, 3, 4}}};
  EXPECT_EQ(InvFreqRule(config),
            "rope_inv_freq(base=10000,dim=8,scaling=longrope(short_factor=[1,1.5,2,2.5]))");
  config["rope_scaling"]["short_factor"] = {1.0, 2.0};
  EXPECT_THAT(std::string(ErrorOf(config).message()), HasSubstr("\"rope_scaling.short_factor\""));
  // Llama's plain RoPE ignores partial_rotary_factor.
  nlohmann::json llama = TinyLlama();
  llama["partial_rotary_factor"] = 0.5;
  EXPECT_EQ(InvFreqRule(llama), "rope_inv_freq(base=10000,dim=16)");
}

}  // namespace
}  // namespace metaload
