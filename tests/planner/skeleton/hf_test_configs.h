// Tiny Hugging Face configs and skeleton accessors shared by the hf_config tests.
#ifndef METALOAD_TESTS_PLANNER_SKELETON_HF_TEST_CONFIGS_H_
#define METALOAD_TESTS_PLANNER_SKELETON_HF_TEST_CONFIGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/skeleton/hf/hf_config.h"
#include "planner/skeleton/skeleton.h"

namespace metaload::testing {

inline Skeleton FromJson(const nlohmann::json& config) {
  absl::StatusOr<Skeleton> skeleton = SkeletonFromHfConfig(config.dump(), "m/config.json");
  EXPECT_TRUE(skeleton.ok()) << skeleton.status();
  return skeleton.ok() ? *skeleton : Skeleton{};
}

inline absl::Status ErrorOf(const nlohmann::json& config) {
  return SkeletonFromHfConfig(config.dump(), "m/config.json").status();
}

inline std::vector<std::string> PersistentNames(const Skeleton& skeleton) {
  std::vector<std::string> names;
  for (const SkeletonTensor& t : skeleton.tensors) {
    if (t.persistent) names.push_back(t.name);
  }
  return names;
}

inline uint64_t PersistentBytes(const Skeleton& skeleton) {
  uint64_t total = 0;
  for (const SkeletonTensor& t : skeleton.tensors) {
    if (t.persistent) total += t.size_bytes();
  }
  return total;
}

inline std::vector<int64_t> ShapeOf(const Skeleton& skeleton, const std::string& name) {
  const SkeletonTensor* t = skeleton.Find(name);
  EXPECT_NE(t, nullptr) << name;
  return t == nullptr ? std::vector<int64_t>{} : t->shape;
}

inline nlohmann::json TinyLlama() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"hidden_size", 64},
          {"intermediate_size", 96},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"vocab_size", 128},
          {"torch_dtype", "bfloat16"}};
}

inline nlohmann::json WithArchitecture(nlohmann::json config, const std::string& architecture) {
  config["architectures"] = {architecture};
  return config;
}

inline nlohmann::json TinyFalcon() {
  return {{"architectures", {"FalconForCausalLM"}},
          {"hidden_size", 64},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"vocab_size", 128}};
}

}  // namespace metaload::testing

#endif  // METALOAD_TESTS_PLANNER_SKELETON_HF_TEST_CONFIGS_H_
