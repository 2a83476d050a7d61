// SkeletonFromHfConfig's errors (one test per distinct problem, each naming the file and the
// key), LooksLikeHfConfig, and the cost of the largest skeleton.
#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/skeleton/hf/hf_config.h"
#include "planner/skeleton/skeleton.h"
#include "tests/planner/skeleton/hf_test_configs.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

using ::metaload::testing::ErrorOf;
using ::metaload::testing::FromJson;
using ::metaload::testing::PersistentBytes;
using ::metaload::testing::TinyFalcon;
using ::metaload::testing::TinyLlama;
using ::metaload::testing::WithArchitecture;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------------------
// Errors: one per distinct problem, each naming the file and the key.

TEST(HfConfigErrorsTest, UnknownArchitectureIsUnimplementedListingSupportedOnes) {
  absl::Status status = ErrorOf(WithArchitecture(TinyLlama(), "BertForMaskedLM"));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(status.message()), HasSubstr("m/config.json: architecture \"BertForMaskedLM\""));
  for (const std::string& name : SupportedHfArchitectures()) {
    EXPECT_THAT(std::string(status.message()), HasSubstr(name));
  }
  EXPECT_THAT(std::string(status.message()), HasSubstr("metactl skeleton CHECKPOINT_DIR"));
  EXPECT_EQ(SupportedHfArchitectures().size(), 8u);
  nlohmann::json by_type = TinyLlama();
  by_type.erase("architectures");
  by_type["model_type"] = "t5";
  EXPECT_EQ(ErrorOf(by_type).code(), absl::StatusCode::kUnimplemented);
}

void ExpectInvalid(const nlohmann::json& config, const std::string& named) {
  absl::Status status = ErrorOf(config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("m/config.json"));
  EXPECT_THAT(std::string(status.message()), HasSubstr(named));
}

TEST(HfConfigErrorsTest, MissingRequiredKey) {
  nlohmann::json config = TinyLlama();
  config.erase("hidden_size");
  ExpectInvalid(config, "missing key \"hidden_size\"");
  config = TinyFalcon();
  config.erase("num_hidden_layers");
  ExpectInvalid(config, "missing key \"num_hidden_layers\" (or \"n_layer\")");
}

TEST(HfConfigErrorsTest, DimensionNotAPositiveInteger) {
  for (const nlohmann::json& bad : {nlohmann::json("64"), nlohmann::json(64.5), nlohmann::json(-1),
                                    nlohmann::json(0), nlohmann::json(int64_t{1} << 40)}) {
    nlohmann::json config = TinyLlama();
    config["intermediate_size"] = bad;
    ExpectInvalid(config, "\"intermediate_size\"");
  }
}

TEST(HfConfigErrorsTest, BoolKeyNotABool) {
  nlohmann::json config = TinyLlama();
  config["tie_word_embeddings"] = "yes";
  ExpectInvalid(config, "\"tie_word_embeddings\": expected true or false");
}

TEST(HfConfigErrorsTest, UnknownDtype) {
  nlohmann::json config = TinyLlama();
  config["torch_dtype"] = "float7";
  ExpectInvalid(config, "\"torch_dtype\"");
}

TEST(HfConfigErrorsTest, HiddenNotDivisibleByHeads) {
  nlohmann::json config = TinyLlama();
  config["num_attention_heads"] = 5;
  ExpectInvalid(config, "\"hidden_size\" (64) is not a multiple of \"num_attention_heads\" (5)");
}

TEST(HfConfigErrorsTest, HeadsNotAMultipleOfKvHeadsNamesBothKeys) {
  nlohmann::json config = TinyLlama();
  config["num_attention_heads"] = 8;
  config["num_key_value_heads"] = 3;
  ExpectInvalid(config, "\"num_attention_heads\" (8) is not a multiple of \"num_key_value_heads\" (3)");
  // The config class's default counts too: Mistral's is 8 key/value heads.
  config = WithArchitecture(TinyLlama(), "MistralForCausalLM");
  config.erase("num_key_value_heads");
  ExpectInvalid(config, "\"num_attention_heads\" (4) is not a multiple of \"num_key_value_heads\" (8)");
  config = TinyFalcon();
  config["new_decoder_architecture"] = true;
  config["num_kv_heads"] = 3;
  ExpectInvalid(config, "\"num_attention_heads\" (4) is not a multiple of \"num_kv_heads\" (3)");
}

TEST(HfConfigErrorsTest, RopeScalingMissingItsParameters) {
  nlohmann::json config = TinyLlama();
  config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  ExpectInvalid(config, "\"rope_scaling\" has no \"low_freq_factor\"");
  config["rope_scaling"] = {{"rope_type", "ntk-by-parts"}};
  ExpectInvalid(config, "\"rope_scaling.rope_type\": RoPE type \"ntk-by-parts\" is not supported");
  config["rope_scaling"] = "linear";
  ExpectInvalid(config, "\"rope_scaling\": expected an object");
}

TEST(HfConfigErrorsTest, ArchitecturesNotAnArrayOfNames) {
  nlohmann::json config = TinyLlama();
  config["architectures"] = "LlamaForCausalLM";
  ExpectInvalid(config, "\"architectures\": expected an array");
  config.erase("architectures");
  ExpectInvalid(config, "neither \"architectures\" nor \"model_type\"");
}

TEST(HfConfigErrorsTest, NotAJsonObject) {
  EXPECT_THAT(std::string(SkeletonFromHfConfig("[1, 2]", "m/config.json").status().message()),
              HasSubstr("m/config.json: expected a JSON object"));
  absl::Status syntax = SkeletonFromHfConfig("{\"hidden_size\": ", "m/config.json").status();
  EXPECT_EQ(syntax.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(syntax.message()), HasSubstr("m/config.json"));
}

TEST(HfConfigErrorsTest, TooManyTensorsIsRefusedBeforeBuilding) {
  nlohmann::json config = WithArchitecture(TinyLlama(), "MixtralForCausalLM");
  config["num_hidden_layers"] = 60000;
  config["num_local_experts"] = 1000;
  ExpectInvalid(config, "refusing to build such a skeleton");
  config["num_hidden_layers"] = 70000;
  ExpectInvalid(config, "\"num_hidden_layers\": expected an integer in [0, 65536]");
}

TEST(HfConfigErrorsTest, ModelPast64BitsIsRefused) {
  nlohmann::json config = TinyLlama();
  config["vocab_size"] = int64_t{1} << 24;
  config["hidden_size"] = int64_t{1} << 24;
  config["intermediate_size"] = int64_t{1} << 24;
  config["num_attention_heads"] = 1;
  config["num_key_value_heads"] = 1;
  config["num_hidden_layers"] = 4096;
  config["torch_dtype"] = "float64";
  ExpectInvalid(config, "past 2^64 bytes");
}

TEST(HfConfigErrorsTest, FileErrorsNameThePath) {
  testing::TempDir dir;
  absl::Status missing = SkeletonFromHfConfigFile(dir.File("absent/config.json")).status();
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.message()), HasSubstr("absent/config.json"));
}

// ---------------------------------------------------------------------------------------------

TEST(LooksLikeHfConfigTest, ByNameOrByKeys) {
  testing::TempDir dir;
  EXPECT_TRUE(LooksLikeHfConfig(dir.File("config.json")));  // the name alone decides
  testing::WriteFileOrDie(dir.File("llama.json"), TinyLlama().dump());
  EXPECT_TRUE(LooksLikeHfConfig(dir.File("llama.json")));
  testing::WriteFileOrDie(dir.File("model.json"), SkeletonToJson(FromJson(TinyLlama())));
  EXPECT_FALSE(LooksLikeHfConfig(dir.File("model.json")));
  testing::WriteFileOrDie(dir.File("junk.json"), "{ nope");
  EXPECT_FALSE(LooksLikeHfConfig(dir.File("junk.json")));
  EXPECT_FALSE(LooksLikeHfConfig(dir.File("absent.json")));
}

// Llama-3.1-405B: 126 layers of 16384 with 128 heads, 8 KV heads, 53248 intermediate.
TEST(HfConfigScaleTest, Llama405BSkeletonIsQuickAndExact) {
  const nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                                 {"hidden_size", 16384},
                                 {"intermediate_size", 53248},
                                 {"num_hidden_layers", 126},
                                 {"num_attention_heads", 128},
                                 {"num_key_value_heads", 8},
                                 {"vocab_size", 128256},
                                 {"max_position_embeddings", 131072},
                                 {"rope_theta", 500000.0},
                                 {"rope_scaling",
                                  {{"factor", 8.0},
                                   {"low_freq_factor", 1.0},
                                   {"high_freq_factor", 4.0},
                                   {"original_max_position_embeddings", 8192},
                                   {"rope_type", "llama3"}}},
                                 {"tie_word_embeddings", false},
                                 {"torch_dtype", "bfloat16"}};
  const std::string text = config.dump();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Skeleton> skeleton = SkeletonFromHfConfig(text, "llama-405b/config.json");
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(skeleton.ok()) << skeleton.status();
  EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count(), 100);
  EXPECT_EQ(skeleton->tensors.size(), 1u + 126 * 9 + 1 + 2 + 1);
  // 405,853,388,800 parameters, the published count, at 2 bytes each.
  EXPECT_EQ(PersistentBytes(*skeleton), 405'853'388'800ull * 2);
}

}  // namespace
}  // namespace metaload
