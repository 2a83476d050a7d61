// MakePlan / MakeLayersPlan / ValidatePlan: plan invariants, balance, refusals with the
// messages users see, determinism, and a cluster-sized model.
#include "planner/strategy/strategy.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/planner/model_builders.h"
#include "tests/planner/strategy/strategy_testing.h"
#include "util/units.h"

namespace metaload {
namespace {

using ::metaload::testing::CheckpointFor;
using ::metaload::testing::LlamaLikeSkeleton;
using ::metaload::testing::MakeTensor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

Cluster UniformCluster(int gpus, uint64_t gpu_memory_bytes, int nodes = 0) {
  absl::StatusOr<Cluster> cluster = MakeUniformCluster(gpus, nodes, gpu_memory_bytes);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return *cluster;
}

absl::StatusOr<Plan> Layers(const Skeleton& s, const Cluster& c, const Checkpoint* ckpt = nullptr) {
  PlanRequest request;
  request.skeleton = &s;
  request.checkpoint = ckpt;
  request.cluster = &c;
  return MakePlan(request);
}

// Units must appear once each, in skeleton order, as contiguous runs per rank; every
// tensor's unit must be on the rank holding the tensor.
void ExpectLayersInvariants(const Plan& plan, const Skeleton& s) {
  ASSERT_TRUE(ValidatePlan(plan, s).ok()) << ValidatePlan(plan, s);
  std::vector<std::string> expected_units;
  absl::flat_hash_map<std::string, int> unit_rank;
  for (const SkeletonTensor& t : s.tensors) {
    std::string unit = PlacementUnitOf(s, t.name);
    if (!unit_rank.contains(unit)) {
      unit_rank[unit] = -1;
      expected_units.push_back(unit);
    }
  }
  std::vector<std::string> all_units;
  for (const RankPlan& rank : plan.ranks) {
    for (const std::string& unit : rank.units) {
      all_units.push_back(unit);
      unit_rank[unit] = rank.rank;
    }
  }
  EXPECT_EQ(all_units, expected_units);
  for (const RankPlan& rank : plan.ranks) {
    for (const ReadItem& item : rank.items) {
      EXPECT_EQ(unit_rank[PlacementUnitOf(s, item.tensor)], rank.rank) << item.tensor;
    }
  }
}

TEST(LayersPlanTest, EqualLayersSplitEvenly) {
  Skeleton s;
  for (int layer = 0; layer < 32; ++layer) {
    s.tensors.push_back(MakeTensor(absl::StrCat("layers.", layer, ".w"), {1024}));
    s.modules.push_back(SkeletonModule{absl::StrCat("layers.", layer), "Block", true});
  }
  absl::StatusOr<Plan> plan = Layers(s, UniformCluster(4, 1 << 20));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectLayersInvariants(*plan, s);
  ASSERT_EQ(plan->ranks.size(), 4u);
  for (const RankPlan& rank : plan->ranks) {
    EXPECT_EQ(rank.units.size(), 8u);
    EXPECT_EQ(rank.size_bytes, 8u * 2048);
    EXPECT_EQ(rank.budget_bytes, (1u << 20) - (1u << 20) / 10);  // 10 % reserved by default
  }
  EXPECT_EQ(plan->ranks[1].units.front(), "layers.8");
  EXPECT_EQ(plan->strategy, "layers");
  EXPECT_EQ(plan->world_size, 4);
}

TEST(LayersPlanTest, LlamaPlanIsValidBalancedAndPlacedOnNodes) {
  const Skeleton s = LlamaLikeSkeleton(16);
  const Checkpoint ckpt = CheckpointFor(s);
  const Cluster cluster = UniformCluster(4, 1 << 20, 2);
  absl::StatusOr<Plan> plan = Layers(s, cluster, &ckpt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectLayersInvariants(*plan, s);
  EXPECT_EQ(plan->model, "llama-test");
  EXPECT_EQ(plan->ranks[0].units.front(), "model.embed_tokens");
  EXPECT_EQ(plan->ranks[3].units.back(), "lm_head");
  EXPECT_EQ(plan->ranks[2].node, "node1");
  EXPECT_EQ(plan->ranks[2].gpu, 0);
  EXPECT_EQ(plan->ranks[3].gpu, 1);
  // No rank can be lighter than a perfect split minus one layer, nor heavier than plus one.
  const uint64_t layer_bytes = 2 * (16 + 4 * 16 * 16 + 16 + 3 * 32 * 16);
  for (const RankPlan& rank : plan->ranks) {
    EXPECT_LE(rank.size_bytes, s.total_size_bytes() / 4 + layer_bytes) << rank.rank;
    EXPECT_GE(rank.size_bytes + layer_bytes, s.total_size_bytes() / 4) << rank.rank;
  }
  // Items carry the checkpoint's byte ranges.
  const ReadItem& first = plan->ranks[0].items.front();
  EXPECT_EQ(first.tensor, "model.embed_tokens.weight");
  EXPECT_EQ(first.file, "model.safetensors");
  EXPECT_EQ(first.begin_offset, ckpt.Find(first.tensor)->begin_offset);
  EXPECT_EQ(first.end_offset - first.begin_offset, first.size_bytes);
}

TEST(LayersPlanTest, NoSplitModuleStaysWholeEvenWhenBalanceWantsASplit) {
  // Without no-split, the three 100-byte linears of block 0 could be spread; as one unit
  // they must share a rank.
  Skeleton s;
  for (const char* name : {"block.0.a.weight", "block.0.b.weight", "block.0.c.weight", "tail.weight"}) {
    s.tensors.push_back(MakeTensor(name, {50}));
  }
  s.modules.push_back(SkeletonModule{"block.0", "", true});
  absl::StatusOr<Plan> plan = Layers(s, UniformCluster(4, 1 << 20));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectLayersInvariants(*plan, s);
  EXPECT_THAT(plan->ranks[0].units, ElementsAre("block.0"));
  EXPECT_EQ(plan->ranks[0].items.size(), 3u);
  EXPECT_THAT(plan->ranks[1].units, ElementsAre("tail"));
  EXPECT_TRUE(plan->ranks[3].items.empty());
  EXPECT_EQ(plan->ranks[3].size_bytes, 0u);
}

TEST(LayersPlanTest, TwoCallsGiveByteIdenticalPlans) {
  const Skeleton s = LlamaLikeSkeleton(7);
  const Checkpoint ckpt = CheckpointFor(s);
  const Cluster cluster = UniformCluster(3, 1 << 20);
  absl::StatusOr<Plan> a = Layers(s, cluster, &ckpt);
  absl::StatusOr<Plan> b = Layers(s, cluster, &ckpt);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(PlanToJson(*a), PlanToJson(*b));
}

TEST(LayersPlanTest, NonPersistentBuffersCountButHaveNoFile) {
  Skeleton s = LlamaLikeSkeleton(2);
  SkeletonTensor inv_freq = MakeTensor("model.layers.1.self_attn.rotary_emb.inv_freq", {8}, DType::kF32);
  inv_freq.is_buffer = true;
  inv_freq.persistent = false;
  s.tensors.insert(s.tensors.begin() + 12, inv_freq);
  const Checkpoint ckpt = CheckpointFor(s);  // holds persistent tensors only
  ASSERT_EQ(ckpt.Find(inv_freq.name), nullptr);
  PlanRequest request{&s, &ckpt, nullptr, 1};
  const Cluster cluster = UniformCluster(1, 1 << 20);
  request.cluster = &cluster;
  absl::StatusOr<Plan> plan = MakePlan(request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectLayersInvariants(*plan, s);
  EXPECT_EQ(plan->ranks[0].size_bytes, s.total_size_bytes());
  const ReadItem& item = plan->ranks[0].items[12];
  EXPECT_EQ(item.tensor, inv_freq.name);
  EXPECT_EQ(item.file, "");
  EXPECT_EQ(item.size_bytes, 32u);
}

TEST(LayersPlanTest, TiedTensorMayBeStoredUnderAnAlias) {
  Skeleton s = LlamaLikeSkeleton(1);
  s.tensors.pop_back();  // lm_head.weight becomes an alias of the embedding
  s.tied_groups.push_back({"model.embed_tokens.weight", "lm_head.weight"});
  Skeleton stored_as_alias = LlamaLikeSkeleton(1);
  stored_as_alias.tensors.erase(stored_as_alias.tensors.begin());
  const Checkpoint ckpt = CheckpointFor(stored_as_alias);
  absl::StatusOr<Plan> plan = Layers(s, UniformCluster(2, 1 << 20), &ckpt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectLayersInvariants(*plan, s);
  const ReadItem& embed = plan->ranks[0].items.front();
  EXPECT_EQ(embed.tensor, "model.embed_tokens.weight");
  EXPECT_EQ(embed.begin_offset, ckpt.Find("lm_head.weight")->begin_offset);
  // No unit exists for the alias alone.
  for (const RankPlan& rank : plan->ranks)
    EXPECT_THAT(rank.units, ::testing::Not(::testing::Contains("lm_head")));
}

TEST(LayersPlanTest, ReserveComesOffEveryBudget) {
  const Skeleton s = LlamaLikeSkeleton(2);
  const Cluster cluster = UniformCluster(2, 1 << 20);
  PlanRequest request{&s, nullptr, &cluster};
  request.options.reserve_fraction = 0.25;
  absl::StatusOr<Plan> plan = MakePlan(request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->ranks[1].budget_bytes, 3u << 18);
  request.options.reserve_bytes = 1000;  // a size wins over the fraction
  plan = MakePlan(request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->ranks[0].budget_bytes, (1u << 20) - 1000);
  request.options.reserve_bytes = 1 << 20;
  testing::ExpectError(MakePlan(request), absl::StatusCode::kInvalidArgument,
                       "--reserve 1.00 MiB leaves nothing of node node0's 1.00 MiB GPUs");
}

TEST(LayersPlanTest, ReserveDecidesWhetherAModelFits) {
  // 8 layers of 5,184 B between 2,048 B embeddings and a 2,080 B head, on 4 GPUs of 12,800 B:
  // whole units in order fit at --reserve 0, not in the 11,520 B left by the default 10 %.
  const Skeleton s = LlamaLikeSkeleton(8);
  const Cluster cluster = UniformCluster(4, 12800);
  PlanRequest request{&s, nullptr, &cluster};
  EXPECT_EQ(MakePlan(request).status().code(), absl::StatusCode::kResourceExhausted);
  request.options.reserve_fraction = 0;
  EXPECT_TRUE(MakePlan(request).ok()) << MakePlan(request).status();
}

// Exact refusals: what overflows, by how much, and what would fit (each alternative planned).
TEST(LayersPlanTest, UnitTooLargeNamesItAndTheTpAndDtypeThatWouldFit) {
  Skeleton s = LlamaLikeSkeleton(2, 64, 128, 256);
  for (SkeletonTensor& t : s.tensors) t.dtype = DType::kF32;
  testing::ExpectError(
      Layers(s, UniformCluster(4, 150 << 10)), absl::StatusCode::kResourceExhausted,
      "unit model.layers.0 needs 160.50 KiB but a GPU's budget is 135.00 KiB (--gpu-memory 150.00 KiB "
      "minus --reserve 10%): 25.50 KiB over, and the layers strategy never splits a unit; would fit: "
      "--strategy tp --tp 2, --dtype bf16, or larger GPUs (--gpu-memory)");
}

TEST(LayersPlanTest, UnitTooLargeForEveryPlanOnTheseGpusSaysHowManyTpNeeds) {
  // 5,184 B layers over 4,500 B budgets: at --tp 2 a layer is 2,624 B per rank, and two
  // pipeline stages hold the model.
  const Skeleton s = LlamaLikeSkeleton(2);
  testing::ExpectError(
      Layers(s, UniformCluster(2, 5000)), absl::StatusCode::kResourceExhausted,
      "unit model.layers.0 needs 5.06 KiB but a GPU's budget is 4.39 KiB (--gpu-memory 4.88 KiB minus "
      "--reserve 10%): 684 B over, and the layers strategy never splits a unit; would fit: --strategy tp "
      "--tp 2 on 4 GPUs (--gpus 4) or larger GPUs (--gpu-memory)");
  const Cluster suggested = UniformCluster(4, 5000);
  PlanRequest request{&s, nullptr, &suggested};
  request.options.strategy = "tp";
  request.options.tp = 2;
  EXPECT_TRUE(MakePlan(request).ok()) << MakePlan(request).status();
}

TEST(LayersPlanTest, UnitTooLargeWithNothingElseThatFits) {
  Skeleton s;
  s.tensors.push_back(MakeTensor("model.layers.0.w", {1024}));
  s.tensors.push_back(MakeTensor("model.layers.3.a", {3, 1024, 1024}));
  s.tensors.push_back(MakeTensor("model.layers.3.b", {3, 1024, 1024}));
  s.modules.push_back(SkeletonModule{"model.layers.3", "", true});
  testing::ExpectError(
      Layers(s, UniformCluster(8, 10ull << 20)), absl::StatusCode::kResourceExhausted,
      "unit model.layers.3 needs 12.00 MiB but a GPU's budget is 9.00 MiB (--gpu-memory 10.00 MiB minus "
      "--reserve 10%): 3.00 MiB over, and the layers strategy never splits a unit; would fit: larger GPUs "
      "(--gpu-memory)");
}

TEST(LayersPlanTest, ModelLargerThanTheClusterCountsTheGpusThatWouldFit) {
  // 2,048 B embeddings, 8 layers of 5,184 B, 2,080 B of norm and head; 18,432 B budgets hold
  // the embeddings and 3 layers, then 3 layers: 2 layers and the head are left.
  const Skeleton s = LlamaLikeSkeleton(8);
  testing::ExpectError(
      Layers(s, UniformCluster(2, 20 << 10)), absl::StatusCode::kResourceExhausted,
      "the model's 11 units (44.53 KiB) do not fit in order on 2 GPUs with budgets of 18.00 KiB "
      "(--gpu-memory 20.00 KiB minus --reserve 10%): 4 units from model.layers.6 on (12.16 KiB) are "
      "left over; would fit: 3 GPUs (--gpus 3) or larger GPUs (--gpu-memory)");
}

TEST(LayersPlanTest, WholeUnitsThatCannotPackAreRefused) {
  Skeleton s;
  for (const char* name : {"a.w", "b.w", "c.w"}) s.tensors.push_back(MakeTensor(name, {3}, DType::kU8));
  // 9 bytes fit in 2 x 5, but whole units do not: 3 + 3 > 5.
  testing::ExpectError(
      Layers(s, UniformCluster(2, 5)), absl::StatusCode::kResourceExhausted,
      "the model's 3 units (9 B) do not fit in order on 2 GPUs with budgets of 5 B (--gpu-memory 5 B minus "
      "--reserve 10%): 1 unit from c on (3 B) is left over; would fit: 3 GPUs (--gpus 3) or larger GPUs "
      "(--gpu-memory)");
}

// Refused before anything is read: bad input (exit 2); 3 is for a failed verification.
TEST(LayersPlanTest, MissingCheckpointTensorWouldStayOnMeta) {
  const Skeleton s = LlamaLikeSkeleton(2);
  Skeleton partial = s;
  partial.tensors.erase(partial.tensors.begin() + 5);
  const Checkpoint ckpt = CheckpointFor(partial);
  testing::ExpectError(Layers(s, UniformCluster(2, 1 << 20), &ckpt), absl::StatusCode::kFailedPrecondition,
                       absl::StrCat("model llama-test: 1 tensor would stay on meta: ", s.tensors[5].name,
                                    " is in the skeleton but not in the checkpoint"),
                       ErrorKind::kBadInput);
}

TEST(LayersPlanTest, EveryMissingTensorIsCounted) {
  const Skeleton s = LlamaLikeSkeleton(2);
  Skeleton partial = s;
  partial.tensors.resize(3);
  const Checkpoint ckpt = CheckpointFor(partial);
  // Grouped as `metactl check` groups them (planner/doctor/missing_groups.h): the whole layer 1
  // is one finding, the rest of layer 0 one per tensor.
  testing::ExpectError(
      Layers(s, UniformCluster(2, 1 << 20), &ckpt), absl::StatusCode::kFailedPrecondition,
      absl::StrCat(s.tensors.size() - 3, " tensors would stay on meta: layer 1 of 2 is missing: "),
      ErrorKind::kBadInput);
  testing::ExpectError(
      Layers(s, UniformCluster(2, 1 << 20), &ckpt), absl::StatusCode::kFailedPrecondition,
      absl::StrCat("; ", s.tensors[3].name, " is in the skeleton but not in the checkpoint; "),
      ErrorKind::kBadInput);
}

TEST(LayersPlanTest, ShapeMismatchShowsBothShapes) {
  const Skeleton s = LlamaLikeSkeleton(1);
  Skeleton other = s;
  other.tensors[2].shape = {16, 8};
  const Checkpoint ckpt = CheckpointFor(other);
  testing::ExpectError(Layers(s, UniformCluster(1, 1 << 20), &ckpt), absl::StatusCode::kFailedPrecondition,
                       absl::StrCat("1 tensor would stay on meta: ", s.tensors[2].name,
                                    " has shape [16, 16] in the skeleton but [16, 8] in the checkpoint"),
                       ErrorKind::kBadInput);
}

TEST(LayersPlanTest, CheckpointDtypeDecidesBytesForNow) {
  const Skeleton s = LlamaLikeSkeleton(1);
  Skeleton f32 = s;
  for (SkeletonTensor& t : f32.tensors) t.dtype = DType::kF32;
  const Checkpoint ckpt = CheckpointFor(f32);
  absl::StatusOr<Plan> plan = Layers(s, UniformCluster(1, 1 << 20), &ckpt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->ranks[0].size_bytes, 2 * s.total_size_bytes());
  EXPECT_EQ(plan->ranks[0].items[0].dtype, DType::kF32);
}

// A BF16 checkpoint with an integer tensor and a computed F32 buffer, planned with --dtype fp32.
Skeleton MixedDtypeSkeleton() {
  Skeleton s = LlamaLikeSkeleton(1);
  s.tensors.push_back(MakeTensor("model.position_ids", {8}, DType::kI64));
  SkeletonTensor inv_freq = MakeTensor("model.rotary_emb.inv_freq", {8}, DType::kF32);
  inv_freq.is_buffer = true;
  inv_freq.persistent = false;
  inv_freq.init = "rope_inv_freq(base=10000,dim=16)";
  s.tensors.push_back(inv_freq);
  return s;
}

TEST(WholeTensorItemsTest, LoadDtypeConvertsFloatsAndCountsTheirBytesInIt) {
  const Skeleton s = MixedDtypeSkeleton();
  const Checkpoint ckpt = CheckpointFor(s);
  absl::StatusOr<std::vector<ReadItem>> items = WholeTensorItems(s, &ckpt, false, DType::kF32);
  ASSERT_TRUE(items.ok()) << items.status();
  ASSERT_EQ(items->size(), s.tensors.size());
  for (size_t i = 0; i < items->size(); ++i) {
    const ReadItem& item = (*items)[i];
    const SkeletonTensor& tensor = s.tensors[i];
    SCOPED_TRACE(item.tensor);
    if (tensor.dtype == DType::kBF16) {
      EXPECT_EQ(item.dtype, DType::kBF16);  // what the file holds, and what offsets span
      EXPECT_EQ(item.to_dtype, DType::kF32);
      EXPECT_EQ(item.size_bytes, 2 * tensor.size_bytes());
      EXPECT_EQ(item.end_offset - item.begin_offset, tensor.size_bytes());
    } else {
      // Integers are indexes, not values to convert; computed buffers keep the skeleton's type.
      EXPECT_FALSE(item.to_dtype.has_value());
      EXPECT_EQ(item.size_bytes, tensor.size_bytes());
    }
  }
  // The same type as stored converts nothing.
  absl::StatusOr<std::vector<ReadItem>> same = WholeTensorItems(s, &ckpt, false, DType::kBF16);
  ASSERT_TRUE(same.ok()) << same.status();
  for (const ReadItem& item : *same) EXPECT_FALSE(item.to_dtype.has_value()) << item.tensor;
}

TEST(WholeTensorItemsTest, RankTotalsAndBudgetsAreInTheDestinationDtype) {
  const Skeleton s = MixedDtypeSkeleton();
  const Checkpoint ckpt = CheckpointFor(s);
  const Cluster cluster = UniformCluster(2, 1 << 20);
  PlanRequest request{&s, &ckpt, &cluster};
  absl::StatusOr<Plan> stored = MakePlan(request);
  request.options.load_dtype = DType::kF32;
  absl::StatusOr<Plan> converted = MakePlan(request);
  ASSERT_TRUE(stored.ok() && converted.ok()) << stored.status() << converted.status();
  ASSERT_TRUE(ValidatePlan(*converted, s).ok()) << ValidatePlan(*converted, s);
  uint64_t stored_bytes = 0, converted_bytes = 0, float_bytes = 0;
  for (const RankPlan& rank : stored->ranks) stored_bytes += rank.size_bytes;
  for (const RankPlan& rank : converted->ranks) {
    uint64_t items_bytes = 0;
    for (const ReadItem& item : rank.items) items_bytes += item.size_bytes;
    EXPECT_EQ(rank.size_bytes, items_bytes) << rank.rank;
    converted_bytes += rank.size_bytes;
  }
  for (const SkeletonTensor& t : s.tensors) float_bytes += t.dtype == DType::kBF16 ? t.size_bytes() : 0;
  EXPECT_EQ(converted_bytes, stored_bytes + float_bytes);  // every BF16 byte doubled, the rest as is
}

TEST(MakePlanTest, UnknownStrategyListsSupportedOnes) {
  const Skeleton s = LlamaLikeSkeleton(1);
  const Cluster cluster = UniformCluster(1, 1 << 20);
  PlanRequest request{&s, nullptr, &cluster, 0, {"pipeline"}};
  testing::ExpectError(MakePlan(request), absl::StatusCode::kInvalidArgument,
                       "unknown strategy \"pipeline\" (supported: layers, tp, fsdp, replicate)");
}

TEST(MakePlanTest, RejectsWorldSizeBeyondTheCluster) {
  const Skeleton s = LlamaLikeSkeleton(1);
  const Cluster cluster = UniformCluster(2, 1 << 20);
  PlanRequest request{&s, nullptr, &cluster, 3};
  EXPECT_EQ(MakePlan(request).status().code(), absl::StatusCode::kInvalidArgument);
  request.world_size = 1;
  ASSERT_TRUE(MakePlan(request).ok());
  EXPECT_EQ(MakePlan(request)->ranks.size(), 1u);
}

TEST(MakePlanTest, RejectsMissingSkeletonOrCluster) {
  PlanRequest request;
  EXPECT_EQ(MakePlan(request).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LayersPlanTest, LargeModelOnAThousandRanksCompletes) {
  // 126 layers x 9 tensors + 3 = 1,137 tensors, Llama-405B-like proportions (sizes only).
  const Skeleton s = LlamaLikeSkeleton(126, 16384, 53248, 128256);
  ASSERT_EQ(s.tensors.size(), 1137u);
  const Checkpoint ckpt = CheckpointFor(s);
  absl::StatusOr<Plan> plan = Layers(s, UniformCluster(1024, 80ull << 30, 128), &ckpt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectLayersInvariants(*plan, s);
  EXPECT_EQ(plan->ranks.size(), 1024u);
  EXPECT_EQ(plan->ranks[128].node, "node16");
}

// ValidatePlan on hand-broken plans.
class ValidatePlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<Plan> plan = Layers(skeleton_, cluster_);
    ASSERT_TRUE(plan.ok()) << plan.status();
    plan_ = *plan;
    ASSERT_TRUE(ValidatePlan(plan_, skeleton_).ok());
  }
  void ExpectInvalidPlan(absl::StatusCode code, const std::string& substring) {
    absl::Status status = ValidatePlan(plan_, skeleton_);
    EXPECT_EQ(status.code(), code) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(substring));
  }
  Skeleton skeleton_ = LlamaLikeSkeleton(4);
  Cluster cluster_ = UniformCluster(2, 1 << 20);
  Plan plan_;
};

TEST_F(ValidatePlanTest, DuplicateNamesBothRanks) {
  ReadItem copy = plan_.ranks[0].items[0];
  plan_.ranks[1].items.push_back(copy);
  plan_.ranks[1].size_bytes += copy.size_bytes;
  ExpectInvalidPlan(absl::StatusCode::kInvalidArgument,
                    "tensor model.embed_tokens.weight is assigned to rank 0 and to rank 1");
}

TEST_F(ValidatePlanTest, MissingTensorIsAssignedToNoRank) {
  ReadItem last = plan_.ranks[1].items.back();
  plan_.ranks[1].items.pop_back();
  plan_.ranks[1].size_bytes -= last.size_bytes;
  ExpectInvalidPlan(absl::StatusCode::kInvalidArgument,
                    "tensor lm_head.weight is assigned to no rank (it would stay on meta)");
}

TEST_F(ValidatePlanTest, UnknownTensor) {
  plan_.ranks[1].items.push_back(ReadItem{"ghost.weight", DType::kF32, {1}, 0, "", 0, 0});
  ExpectInvalidPlan(absl::StatusCode::kInvalidArgument,
                    "rank 1 has an item for tensor ghost.weight, which the skeleton does not have");
}

TEST_F(ValidatePlanTest, RankBytesMustAddUp) {
  plan_.ranks[0].size_bytes += 1;
  ExpectInvalidPlan(absl::StatusCode::kInvalidArgument, "rank 0 says it holds");
}

TEST_F(ValidatePlanTest, RankOverBudget) {
  plan_.ranks[1].budget_bytes = plan_.ranks[1].size_bytes - 1;
  ExpectInvalidPlan(absl::StatusCode::kResourceExhausted, "rank 1 holds");
}

TEST_F(ValidatePlanTest, ShapeMustMatchTheSkeleton) {
  plan_.ranks[0].items[0].shape = {1};
  ExpectInvalidPlan(absl::StatusCode::kInvalidArgument,
                    "rank 0: tensor model.embed_tokens.weight has shape [1]");
}

TEST_F(ValidatePlanTest, WorldSizeMustMatchRanks) {
  plan_.world_size = 3;
  ExpectInvalidPlan(absl::StatusCode::kInvalidArgument, "plan has world size 3 but 2 ranks");
}

}  // namespace
}  // namespace metaload
