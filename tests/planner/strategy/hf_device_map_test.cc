// HfDeviceMap: a layers plan on one node as transformers' device_map — units as keys, every
// tensor and tied alias under exactly one key, refusals naming why.
// (tests/integration/cli/test_hf_device_map.py checks the same with accelerate on a real model.)
#include "planner/strategy/hf_device_map.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/strategy/strategy.h"
#include "tests/planner/model_builders.h"

namespace metaload {
namespace {

using ::metaload::testing::LlamaLikeSkeleton;
using ::metaload::testing::MakeTensor;
using ::testing::HasSubstr;

Plan MakeOrDie(const Skeleton& s, int gpus, int nodes = 0, const std::string& strategy = "layers") {
  absl::StatusOr<Cluster> cluster = MakeUniformCluster(gpus, nodes, 1ull << 30);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  PlanRequest request;
  request.skeleton = &s;
  request.cluster = &*cluster;
  request.options.strategy = strategy;
  absl::StatusOr<Plan> plan = MakePlan(request);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

// How many keys cover `name` the way accelerate reads a device_map: the key itself or a module
// prefix of it.
int KeysCovering(const std::vector<HfDeviceMapEntry>& entries, const std::string& name) {
  int count = 0;
  for (const HfDeviceMapEntry& e : entries) {
    count += e.module == name || absl::StartsWith(name, e.module + ".") ? 1 : 0;
  }
  return count;
}

std::vector<std::pair<std::string, int>> AsPairs(const std::vector<HfDeviceMapEntry>& entries) {
  std::vector<std::pair<std::string, int>> pairs;
  for (const HfDeviceMapEntry& e : entries) pairs.emplace_back(e.module, e.gpu);
  return pairs;
}

TEST(HfDeviceMapTest, UnitsInModelOrderOnTheirRanksGpus) {
  const Skeleton s = LlamaLikeSkeleton(2);
  absl::StatusOr<std::vector<HfDeviceMapEntry>> map = HfDeviceMap(MakeOrDie(s, 2), s);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_THAT(AsPairs(*map), ::testing::ElementsAre(std::pair<std::string, int>{"model.embed_tokens", 0},
                                                    std::pair<std::string, int>{"model.layers.0", 0},
                                                    std::pair<std::string, int>{"model.layers.1", 1},
                                                    std::pair<std::string, int>{"model.norm", 1},
                                                    std::pair<std::string, int>{"lm_head", 1}));
  for (const SkeletonTensor& t : s.tensors) EXPECT_EQ(KeysCovering(*map, t.name), 1) << t.name;
}

TEST(HfDeviceMapTest, JsonIsOneKeyPerLine) {
  EXPECT_EQ(HfDeviceMapToJson({{"model.embed_tokens", 0}, {"lm_head", 1}}),
            "{\n  \"model.embed_tokens\": 0,\n  \"lm_head\": 1\n}\n");
  EXPECT_EQ(HfDeviceMapToJson({}), "{}\n");
}

TEST(HfDeviceMapTest, TiedAliasGoesWithTheTensorItShares) {
  Skeleton s = LlamaLikeSkeleton(4);
  s.tensors.pop_back();  // lm_head.weight becomes an alias of the embedding, on GPU 0
  s.tied_groups.push_back({"model.embed_tokens.weight", "lm_head.weight"});
  absl::StatusOr<std::vector<HfDeviceMapEntry>> map = HfDeviceMap(MakeOrDie(s, 2), s);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->back().module, "lm_head");
  EXPECT_EQ(map->back().gpu, 0);
  EXPECT_EQ(KeysCovering(*map, "lm_head.weight"), 1);
}

TEST(HfDeviceMapTest, RootTensorsAndModulesHoldingUnitsBecomeTensorKeys) {
  // "scale" sits in the root module; "model.scale" in "model", which holds model.layers.N.
  Skeleton s = LlamaLikeSkeleton(2);
  s.tensors.insert(s.tensors.begin(), MakeTensor("scale", {}));
  s.tensors.push_back(MakeTensor("model.scale", {}));
  absl::StatusOr<std::vector<HfDeviceMapEntry>> map = HfDeviceMap(MakeOrDie(s, 2), s);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->front().module, "scale");
  EXPECT_EQ(map->back().module, "model.scale");
  for (const HfDeviceMapEntry& e : *map) EXPECT_NE(e.module, "model");
  for (const SkeletonTensor& t : s.tensors) EXPECT_EQ(KeysCovering(*map, t.name), 1) << t.name;
}

TEST(HfDeviceMapTest, UnitSplitOverGpusBecomesTensorKeys) {
  // lm_head's bias is planned on the last GPU, its tied weight lives with the embedding.
  Skeleton s = LlamaLikeSkeleton(4);
  s.tensors.back() = MakeTensor("lm_head.bias", {64});
  s.tied_groups.push_back({"model.embed_tokens.weight", "lm_head.weight"});
  absl::StatusOr<std::vector<HfDeviceMapEntry>> map = HfDeviceMap(MakeOrDie(s, 2), s);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_THAT(AsPairs(*map), ::testing::Contains(std::pair<std::string, int>{"lm_head.bias", 1}));
  EXPECT_THAT(AsPairs(*map), ::testing::Contains(std::pair<std::string, int>{"lm_head.weight", 0}));
  EXPECT_EQ(KeysCovering(*map, "lm_head.weight"), 1);
  EXPECT_EQ(KeysCovering(*map, "lm_head.bias"), 1);
}

TEST(HfDeviceMapTest, RefusesOtherStrategiesSayingWhy) {
  const Skeleton s = LlamaLikeSkeleton(2);
  absl::StatusOr<std::vector<HfDeviceMapEntry>> map = HfDeviceMap(MakeOrDie(s, 2, 0, "fsdp"), s);
  ASSERT_FALSE(map.ok());
  EXPECT_EQ(map.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      map.status().message(),
      "--format hf-device-map needs --strategy layers: transformers' device_map puts each module whole on "
      "one device, and a fsdp plan splits tensors across ranks");
  EXPECT_THAT(std::string(HfDeviceMap(MakeOrDie(s, 2, 0, "replicate"), s).status().message()),
              HasSubstr("a replicate plan puts every tensor on every rank"));
}

TEST(HfDeviceMapTest, RefusesAPlanOverSeveralNodes) {
  const Skeleton s = LlamaLikeSkeleton(2);
  absl::StatusOr<std::vector<HfDeviceMapEntry>> map = HfDeviceMap(MakeOrDie(s, 4, 2), s);
  ASSERT_FALSE(map.ok());
  EXPECT_EQ(map.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      map.status().message(),
      "--format hf-device-map is for one node, and the plan spans 2 (node0, node1): transformers' device_map "
      "places modules on the GPUs of one host; plan with --nodes 1");
}

TEST(HfDeviceMapTest, RefusesAPlanMissingATensor) {
  const Skeleton s = LlamaLikeSkeleton(2);
  Plan plan = MakeOrDie(s, 2);
  plan.ranks[1].items.pop_back();
  EXPECT_EQ(HfDeviceMap(plan, s).status().message(), "tensor lm_head.weight is in no rank of the plan");
}

}  // namespace
}  // namespace metaload
