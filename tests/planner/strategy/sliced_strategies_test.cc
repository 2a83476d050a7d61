// The replicate, fsdp and tp strategies: who holds which slice, refusals with the messages
// users see, and ValidatePlan's coverage check on hand-broken sliced plans.
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/slice.h"
#include "planner/strategy/strategy.h"
#include "tests/planner/model_builders.h"
#include "tests/planner/strategy/strategy_testing.h"
#include "util/error_kind.h"
#include "util/units.h"

namespace metaload {
namespace {

using ::metaload::testing::CheckpointFor;
using ::metaload::testing::LlamaLikeSkeleton;
using ::testing::HasSubstr;

Cluster Uniform(int gpus, uint64_t gpu_memory_bytes = 80 * kGiB, int nodes = 0) {
  absl::StatusOr<Cluster> cluster = MakeUniformCluster(gpus, nodes, gpu_memory_bytes);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return *cluster;
}

absl::StatusOr<Plan> Make(const std::string& strategy, const Skeleton& s, const Cluster& c, int tp = 1,
                          int pp = 0, const Checkpoint* ckpt = nullptr) {
  PlanRequest request;
  request.skeleton = &s;
  request.cluster = &c;
  request.checkpoint = ckpt;
  request.options.strategy = strategy;
  request.options.tp = tp;
  request.options.pp = pp;
  return MakePlan(request);
}

TEST(ReplicateTest, EveryRankHoldsEveryTensorWithinAReservedBudget) {
  Skeleton s = LlamaLikeSkeleton(2);
  Cluster c = Uniform(3, 20000);
  absl::StatusOr<Plan> plan = Make("replicate", s, c);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(ValidatePlan(*plan, s).ok()) << ValidatePlan(*plan, s);
  EXPECT_EQ(plan->replicas, 3);
  for (const RankPlan& rank : plan->ranks) {
    EXPECT_EQ(rank.items.size(), s.tensors.size());
    EXPECT_EQ(rank.size_bytes, s.total_size_bytes());
  }
  EXPECT_EQ(plan->ranks[0].budget_bytes, 18000u);  // 10 % reserved by default
}

// Exact refusals: the rank or unit that overflows, by how much, and what would fit, each
// alternative planned. LlamaLikeSkeleton(2) holds 14,528 B: 2,048 B embeddings, two 5,184 B
// layers, a 32 B norm and a 2,048 B head.
TEST(ReplicateTest, OverflowNamesTheRankAndWhatWouldFit) {
  Skeleton s = LlamaLikeSkeleton(2);
  testing::ExpectError(
      Make("replicate", s, Uniform(4, 8000)), absl::StatusCode::kResourceExhausted,
      "rank 0 (node node0, gpu 0) needs 14.16 KiB but its budget is 7.03 KiB (--gpu-memory 7.81 KiB minus "
      "--reserve 10%): 7.12 KiB over; replicate holds the whole model on every GPU; would fit: --strategy tp "
      "--tp 4 --pp 1, --strategy fsdp, or larger GPUs (--gpu-memory)");
}

TEST(ReplicateTest, OverflowWithNothingElseThatFits) {
  Skeleton s = LlamaLikeSkeleton(2);
  testing::ExpectError(
      Make("replicate", s, Uniform(2, 100)), absl::StatusCode::kResourceExhausted,
      "rank 0 (node node0, gpu 0) needs 14.16 KiB but its budget is 90 B (--gpu-memory 100 B minus --reserve "
      "10%): 14.07 KiB over; replicate holds the whole model on every GPU; would fit: larger GPUs "
      "(--gpu-memory)");
}

TEST(FsdpTest, OverflowCountsTheGpusThatWouldFit) {
  Skeleton s = LlamaLikeSkeleton(2);
  testing::ExpectError(
      Make("fsdp", s, Uniform(2, 4000)), absl::StatusCode::kResourceExhausted,
      "rank 0 (node node0, gpu 0) needs 7.08 KiB but its budget is 3.52 KiB (--gpu-memory 3.91 KiB minus "
      "--reserve 10%): 3.56 KiB over; fsdp spreads the model over all 2 GPUs; would fit: 5 GPUs (--gpus 5) "
      "or larger GPUs (--gpu-memory)");
}

TEST(FsdpTest, OverflowOfWhatEveryRankHoldsWholeNamesNoGpuCount) {
  Skeleton s;
  s.tensors.push_back(testing::MakeTensor("scale", {}, DType::kF32));
  s.tensors.push_back(testing::MakeTensor("w", {4, 4}, DType::kF32));
  testing::ExpectError(
      Make("fsdp", s, Uniform(2, 3)), absl::StatusCode::kResourceExhausted,
      "rank 0 (node node0, gpu 0) needs 36 B but its budget is 3 B (--gpu-memory 3 B minus --reserve 10%): "
      "33 B over; fsdp spreads the model over all 2 GPUs; would fit: larger GPUs (--gpu-memory)");
}

TEST(FsdpTest, OverflowSuggestsAnotherDtype) {
  Skeleton s = LlamaLikeSkeleton(2);
  for (SkeletonTensor& t : s.tensors) t.dtype = DType::kF32;
  testing::ExpectError(
      Make("fsdp", s, Uniform(2, 10000)), absl::StatusCode::kResourceExhausted,
      "rank 0 (node node0, gpu 0) needs 14.16 KiB but its budget is 8.79 KiB (--gpu-memory 9.77 KiB minus "
      "--reserve 10%): 5.37 KiB over; fsdp spreads the model over all 2 GPUs; would fit: 4 GPUs (--gpus 4), "
      "--dtype bf16, or larger GPUs (--gpu-memory)");
}

TEST(FsdpTest, DimZeroChunksLikeShard0WithTheRemainderLast) {
  Skeleton s = LlamaLikeSkeleton(1);  // embed [64, 16], norm [16], q [16, 16], gate [32, 16]
  Checkpoint ckpt = CheckpointFor(s);
  Cluster c = Uniform(3);
  absl::StatusOr<Plan> plan = Make("fsdp", s, c, 1, 0, &ckpt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(ValidatePlan(*plan, s).ok()) << ValidatePlan(*plan, s);
  // 64 rows over 3 ranks: chunks of 22, the last holds 20.
  const ReadItem* last = testing::FindItem(plan->ranks[2], "model.embed_tokens.weight");
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(*last->slice, (TensorSlice{0, 44, 20}));
  EXPECT_EQ(last->size_bytes, 20u * 16 * 2);
  // Offsets stay the whole tensor's; its runs are the slice's one contiguous range.
  const TensorLayout* layout = ckpt.Find("model.embed_tokens.weight");
  EXPECT_EQ(last->begin_offset, layout->begin_offset);
  EXPECT_EQ(last->end_offset, layout->end_offset);
  absl::StatusOr<StridedRuns> runs = ItemRuns(*last);
  ASSERT_TRUE(runs.ok()) << runs.status();
  EXPECT_EQ(*runs, (StridedRuns{layout->begin_offset + 44 * 32, 20 * 32, 20 * 32, 1}));
}

// A dim smaller than the world: DTensor's Shard(0) gives ranks 0-2 a row each and rank 3 an
// empty local tensor [0, 8]; the plan gives rank 3 the empty slice, 0 bytes, nothing to read.
TEST(FsdpTest, RanksPastTheEndHoldEmptySlicesLikeDTensor) {
  Skeleton s;
  s.tensors.push_back(testing::MakeTensor("tiny.weight", {3, 8}));
  Checkpoint ckpt = CheckpointFor(s);
  absl::StatusOr<Plan> plan = Make("fsdp", s, Uniform(4), 1, 0, &ckpt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(ValidatePlan(*plan, s).ok()) << ValidatePlan(*plan, s);
  std::vector<int64_t> lengths;
  for (const RankPlan& rank : plan->ranks) {
    ASSERT_EQ(rank.items.size(), 1u) << "rank " << rank.rank;
    lengths.push_back(rank.items[0].slice->length);
  }
  EXPECT_THAT(lengths, ::testing::ElementsAre(1, 1, 1, 0));
  const ReadItem& empty = plan->ranks[3].items[0];
  EXPECT_EQ(*empty.slice, (TensorSlice{0, 3, 0}));
  EXPECT_EQ(empty.size_bytes, 0u);
  EXPECT_EQ(plan->ranks[3].size_bytes, 0u);
  absl::StatusOr<StridedRuns> runs = ItemRuns(empty);
  ASSERT_TRUE(runs.ok()) << runs.status();
  EXPECT_EQ(runs->run_count, 0u);
  // The plan JSON carries the empty slice and reads back.
  absl::StatusOr<Plan> back = PlanFromJson(PlanToJson(*plan));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back->ranks[3].items[0].slice, (TensorSlice{0, 3, 0}));
}

TEST(FsdpTest, ScalarsAndComputedBuffersAreOnEveryRank) {
  Skeleton s;
  s.tensors.push_back(testing::MakeTensor("scale", {}));
  SkeletonTensor rope = testing::MakeTensor("rotary.inv_freq", {8}, DType::kF32);
  rope.is_buffer = true;
  rope.persistent = false;
  rope.init = "rope_inv_freq(base=10000,dim=16)";
  s.tensors.push_back(rope);
  absl::StatusOr<Plan> plan = Make("fsdp", s, Uniform(2));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(ValidatePlan(*plan, s).ok()) << ValidatePlan(*plan, s);
  for (const RankPlan& rank : plan->ranks) EXPECT_EQ(rank.items.size(), 2u);
}

TEST(TpTest, ColumnRowVocabAndReplicatedRules) {
  Skeleton s = LlamaLikeSkeleton(4);
  Checkpoint ckpt = CheckpointFor(s);
  Cluster c = Uniform(8);
  absl::StatusOr<Plan> plan = Make("tp", s, c, 2, 2, &ckpt);  // 2 data-parallel replicas
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(ValidatePlan(*plan, s).ok()) << ValidatePlan(*plan, s);
  EXPECT_EQ(plan->group_size, 2);
  EXPECT_EQ(plan->replicas, 2);
  const RankPlan& r1 = plan->ranks[1];  // stage 0, tp index 1
  EXPECT_EQ(*testing::FindItem(r1, "model.embed_tokens.weight")->slice, (TensorSlice{0, 32, 32}));
  EXPECT_EQ(*testing::FindItem(r1, "model.layers.0.self_attn.q_proj.weight")->slice, (TensorSlice{0, 8, 8}));
  const ReadItem* o_proj = testing::FindItem(r1, "model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(*o_proj->slice, (TensorSlice{1, 8, 8}));
  // A dim-1 slice keeps the whole tensor's range: readers derive the strided runs.
  EXPECT_EQ(o_proj->end_offset - o_proj->begin_offset, 16u * 16 * 2);
  EXPECT_FALSE(testing::FindItem(r1, "model.layers.0.input_layernorm.weight")->slice.has_value());
  // Replica 1 loads exactly what replica 0 does.
  for (int r = 0; r < 4; ++r) EXPECT_EQ(plan->ranks[r].items.size(), plan->ranks[r + 4].items.size());
  EXPECT_EQ(plan->ranks[2].units.front(), plan->ranks[6].units.front());
}

// Dims without heads split unevenly, as DTensor's Shard(dim) (torch.chunk) does: a vocabulary of
// 66 over 4 ranks is 17, 17, 17 and 15 rows, an MLP of 30 is 8, 8, 8 and 6 (down_proj on dim 1).
TEST(TpTest, DimsWithoutHeadsSplitUnevenlyLikeTorchChunk) {
  Skeleton s = LlamaLikeSkeleton(1, /*hidden=*/16, /*intermediate=*/30, /*vocab=*/66);
  Checkpoint ckpt = CheckpointFor(s);
  absl::StatusOr<Plan> plan = Make("tp", s, Uniform(4), 4, 0, &ckpt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(ValidatePlan(*plan, s).ok()) << ValidatePlan(*plan, s);
  auto slice = [&](int rank, const std::string& tensor) {
    return *testing::FindItem(plan->ranks[rank], tensor)->slice;
  };
  EXPECT_EQ(slice(0, "model.embed_tokens.weight"), (TensorSlice{0, 0, 17}));
  EXPECT_EQ(slice(3, "model.embed_tokens.weight"), (TensorSlice{0, 51, 15}));
  EXPECT_EQ(slice(3, "lm_head.weight"), (TensorSlice{0, 51, 15}));
  EXPECT_EQ(slice(2, "model.layers.0.mlp.gate_proj.weight"), (TensorSlice{0, 16, 8}));
  EXPECT_EQ(slice(3, "model.layers.0.mlp.up_proj.weight"), (TensorSlice{0, 24, 6}));
  EXPECT_EQ(slice(3, "model.layers.0.mlp.down_proj.weight"), (TensorSlice{1, 24, 6}));
  EXPECT_EQ(testing::FindItem(plan->ranks[3], "model.layers.0.mlp.down_proj.weight")->size_bytes,
            16u * 6 * 2);
  // Heads still split evenly: 4 heads of 4 dims, one per rank.
  EXPECT_EQ(slice(3, "model.layers.0.self_attn.q_proj.weight"), (TensorSlice{0, 12, 4}));
  // Rank 0 holds the longest pieces: 2 more rows of the embedding and of the head, 2 more of
  // each of the three MLP matrices (16 BF16 values each).
  EXPECT_EQ(plan->ranks[0].size_bytes - plan->ranks[3].size_bytes, (2u * 2 + 3u * 2) * 16 * 2);
}

// A dim smaller than the group: the ranks past its end hold empty slices, as in DTensor.
TEST(TpTest, ADimSmallerThanTheGroupGivesEmptySlices) {
  Skeleton s = LlamaLikeSkeleton(1, 16, 32, /*vocab=*/3);
  absl::StatusOr<Plan> plan = Make("tp", s, Uniform(4), 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(ValidatePlan(*plan, s).ok()) << ValidatePlan(*plan, s);
  std::vector<int64_t> lengths;
  for (const RankPlan& rank : plan->ranks)
    lengths.push_back(testing::FindItem(rank, "lm_head.weight")->slice->length);
  EXPECT_THAT(lengths, ::testing::ElementsAre(1, 1, 1, 0));
  EXPECT_EQ(testing::FindItem(plan->ranks[3], "lm_head.weight")->size_bytes, 0u);
}

// Budgets hold for the fullest rank of a group (rank 0, whose pieces are the longest), not for
// the others: one byte less than rank 0 needs is refused, naming rank 0's bytes.
TEST(TpTest, UnevenSplitsAreBudgetedByTheFullestRank) {
  Skeleton s = LlamaLikeSkeleton(1, 16, 30, 66);
  absl::StatusOr<Plan> fits = Make("tp", s, Uniform(4), 4);
  ASSERT_TRUE(fits.ok()) << fits.status();
  uint64_t fullest = 0;
  for (const RankPlan& rank : fits->ranks) fullest = std::max(fullest, rank.size_bytes);
  EXPECT_EQ(fits->ranks[0].size_bytes, fullest);
  Cluster tight = Uniform(4, fullest - 1);
  Cluster exact = Uniform(4, fullest);
  PlanRequest request;
  request.skeleton = &s;
  request.cluster = &tight;
  request.options.strategy = "tp";
  request.options.tp = 4;
  request.options.reserve_fraction = 0;
  testing::ExpectError(MakePlan(request), absl::StatusCode::kResourceExhausted,
                       absl::StrCat("(", FormatBytes(fullest), " per rank at --tp 4) do not fit"));
  request.cluster = &exact;
  EXPECT_TRUE(MakePlan(request).ok()) << MakePlan(request).status();
}

// Heads are never split unevenly: a rank of a group holds whole heads or the split is refused.
TEST(TpTest, HeadsThatDoNotDivideStayRefused) {
  Skeleton s = LlamaLikeSkeleton(1);
  testing::ExpectError(
      Make("tp", s, Uniform(3), 3), absl::StatusCode::kInvalidArgument,
      "tensor model.layers.0.self_attn.q_proj.weight [16, 16]: its 4 attention heads do not divide by "
      "--tp 3 (each rank of a tensor-parallel group holds whole heads)");
}

TEST(TpTest, GroupMustStayInsideANode) {
  Skeleton s = LlamaLikeSkeleton(2);
  testing::ExpectError(Make("tp", s, Uniform(8, 80 * kGiB, 2), 8), absl::StatusCode::kInvalidArgument,
                       "a tensor-parallel group stays inside one node");
}

TEST(TpTest, WorldMustDivideByTpTimesPp) {
  Skeleton s = LlamaLikeSkeleton(2);
  testing::ExpectError(Make("tp", s, Uniform(8), 2, 3), absl::StatusCode::kInvalidArgument,
                       "--tp 2 x --pp 3");
}

// tp and pp come from flags and GetPlan requests. tp 4 x pp 2^30 wrapped an int to 0 and then
// divided by it (SIGFPE); tp 2 x pp 2^31-1 wrapped to -2, passed the divisibility check and
// allocated one capacity per stage (16 GiB). Each is refused before any product or allocation.
TEST(TpTest, TpAndPpFromARequestAreBoundedBeforeAnyProduct) {
  Skeleton s = LlamaLikeSkeleton(2);
  Cluster c = Uniform(8);
  constexpr int kMaxInt = std::numeric_limits<int>::max();
  testing::ExpectError(Make("tp", s, c, 4, 1 << 30), absl::StatusCode::kInvalidArgument,
                       "--pp 1073741824 must be between 1 and the world size 8 (or 0: world size / --tp)");
  testing::ExpectError(Make("tp", s, c, 2, kMaxInt), absl::StatusCode::kInvalidArgument,
                       "--pp 2147483647 must be between 1 and the world size 8");
  testing::ExpectError(Make("tp", s, c, kMaxInt), absl::StatusCode::kInvalidArgument,
                       "--tp 2147483647 must be at least 1 and divide the world size 8");
  testing::ExpectError(Make("tp", s, c, 2, -2), absl::StatusCode::kInvalidArgument,
                       "--pp -2 must be between 1 and the world size 8");
  testing::ExpectError(Make("tp", s, c, -4), absl::StatusCode::kInvalidArgument,
                       "--tp -4 must be at least 1 and divide the world size 8");
  // In range, but not dividing the world: the 64-bit product says so.
  testing::ExpectError(Make("tp", s, c, 8, 8), absl::StatusCode::kInvalidArgument,
                       "--tp 8 x --pp 8 must divide");
}

TEST(TpTest, UnitTooLargeSaysWhichTpWouldFit) {
  Skeleton s = LlamaLikeSkeleton(2);
  // A layer is 2,624 B per rank at --tp 2, 1,344 B at --tp 4.
  testing::ExpectError(
      Make("tp", s, Uniform(8, 2500), 2), absl::StatusCode::kResourceExhausted,
      "unit model.layers.0 needs 2.56 KiB per rank at --tp 2 but a GPU's budget is 2.20 KiB (--gpu-memory "
      "2.44 "
      "KiB minus --reserve 10%): 374 B over, and a pipeline stage never splits a unit; would fit: --tp 4 or "
      "larger GPUs (--gpu-memory)");
}

TEST(TpTest, UnitTooLargeWithNothingElseThatFits) {
  Skeleton s = LlamaLikeSkeleton(2);
  testing::ExpectError(
      Make("tp", s, Uniform(2, 1000), 2), absl::StatusCode::kResourceExhausted,
      "unit model.layers.0 needs 2.56 KiB per rank at --tp 2 but a GPU's budget is 900 B (--gpu-memory 1000 "
      "B "
      "minus --reserve 10%): 1.68 KiB over, and a pipeline stage never splits a unit; would fit: larger GPUs "
      "(--gpu-memory)");
}

TEST(TpTest, UnitTooLargeAtEveryTpOnTheseGpusSaysHowManyAHigherTpNeeds) {
  // 1,800 B budgets: a layer is 2,624 B per rank at --tp 2, 1,344 B at --tp 4, where the
  // embeddings, each layer, and the norm with the head each need a stage of their own.
  Skeleton s = LlamaLikeSkeleton(8);
  testing::ExpectError(
      Make("tp", s, Uniform(4, 2000), 2), absl::StatusCode::kResourceExhausted,
      "unit model.layers.0 needs 2.56 KiB per rank at --tp 2 but a GPU's budget is 1.76 KiB (--gpu-memory "
      "1.95 KiB minus --reserve 10%): 824 B over, and a pipeline stage never splits a unit; would fit: --tp "
      "4 "
      "on 40 GPUs (--gpus 40) or larger GPUs (--gpu-memory)");
  EXPECT_TRUE(Make("tp", s, Uniform(40, 2000), 4).ok()) << Make("tp", s, Uniform(40, 2000), 4).status();
}

TEST(TpTest, TooFewStagesCountsTheGpusThatWouldFit) {
  // Per rank at --tp 2: embeddings 1,024 B, layers 2,624 B, norm and head 1,056 B; 4,500 B
  // budgets need 4 stages: embeddings and layer 0, layer 1, layer 2, layer 3 and the head.
  Skeleton s = LlamaLikeSkeleton(4);
  testing::ExpectError(
      Make("tp", s, Uniform(4, 5000), 2), absl::StatusCode::kResourceExhausted,
      "the model's 7 units (12.28 KiB per rank at --tp 2) do not fit in order on 2 pipeline stages with "
      "budgets of 4.39 KiB (--gpu-memory 4.88 KiB minus --reserve 10%): 4 units from model.layers.2 on (6.16 "
      "KiB per rank) are left over; would fit: 8 GPUs (--gpus 8) or larger GPUs (--gpu-memory)");
  // With --pp given and data-parallel replicas, more GPUs means more stages for every replica.
  testing::ExpectError(Make("tp", s, Uniform(8, 5000), 2, 2), absl::StatusCode::kResourceExhausted,
                       "would fit: 16 GPUs (--gpus 16 --pp 4) or larger GPUs (--gpu-memory)");
}

TEST(TpTest, ReserveAsBytes) {
  Skeleton s = LlamaLikeSkeleton(1);
  Cluster c = Uniform(2, 1 << 20);
  PlanRequest request;
  request.skeleton = &s;
  request.cluster = &c;
  request.options.strategy = "tp";
  request.options.tp = 2;
  request.options.reserve_bytes = 1 << 19;
  absl::StatusOr<Plan> plan = MakePlan(request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->ranks[0].budget_bytes, 1u << 19);
  request.options.reserve_bytes = 1 << 20;
  testing::ExpectError(MakePlan(request), absl::StatusCode::kInvalidArgument, "leaves nothing");
}

// ValidatePlan on hand-broken sliced plans.
class ValidateSlicedPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<Plan> plan = Make("fsdp", skeleton_, cluster_);
    ASSERT_TRUE(plan.ok()) << plan.status();
    plan_ = *plan;
    ASSERT_TRUE(ValidatePlan(plan_, skeleton_).ok());
  }
  void ExpectInvalid(const std::string& substring) {
    absl::Status status = ValidatePlan(plan_, skeleton_);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(substring));
  }
  ReadItem& Embed(int rank) { return plan_.ranks[rank].items[0]; }
  // Moves rank 1's embedding slice, keeping its bytes consistent so coverage is what fails.
  void MoveSlice(int64_t start, int64_t length) {
    ReadItem& item = Embed(1);
    plan_.ranks[1].size_bytes -= item.size_bytes;
    item.slice->start = start;
    item.slice->length = length;
    item.size_bytes = static_cast<uint64_t>(length) * 16 * 2;
    plan_.ranks[1].size_bytes += item.size_bytes;
  }
  Skeleton skeleton_ = LlamaLikeSkeleton(1);
  Cluster cluster_ = Uniform(2);
  Plan plan_;
};

TEST_F(ValidateSlicedPlanTest, OverlapNamesTensorSliceAndRank) {
  MoveSlice(30, 34);  // rank 0 holds [0, 32)
  ExpectInvalid("tensor model.embed_tokens.weight [64, 16]: rank 1 holds dim 0 [30, 64), overlapping");
}

TEST_F(ValidateSlicedPlanTest, GapNamesTheRank) {
  MoveSlice(33, 31);
  ExpectInvalid("rank 1 holds dim 0 [33, 64), leaving a gap at 32");
}

TEST_F(ValidateSlicedPlanTest, ShortCoverage) {
  Embed(1).slice->length = 16;
  plan_.ranks[1].size_bytes -= Embed(1).size_bytes / 2;
  Embed(1).size_bytes /= 2;
  ExpectInvalid("slices on dim 0 end at 48, not 64");
}

TEST_F(ValidateSlicedPlanTest, SliceBytesMustMatch) {
  Embed(1).size_bytes += 2;
  plan_.ranks[1].size_bytes += 2;
  ExpectInvalid("says 1026 bytes but holds 1024");
}

TEST_F(ValidateSlicedPlanTest, SliceOutsideTheTensor) {
  Embed(1).slice->length = 40;
  ExpectInvalid("has slice dim 0 [32, 72), outside the tensor");
}

// An empty slice is accepted (a rank past the end of an uneven split) but covers nothing.
TEST_F(ValidateSlicedPlanTest, AnEmptySliceCoversNothing) {
  MoveSlice(64, 0);
  ExpectInvalid("tensor model.embed_tokens.weight [64, 16]: slices on dim 0 end at 32, not 64");
}

TEST_F(ValidateSlicedPlanTest, MixedDims) {
  Embed(1).slice->dim = 1;
  Embed(1).slice->start = 0;
  Embed(1).slice->length = 16;
  plan_.ranks[1].size_bytes += Embed(1).size_bytes;
  Embed(1).size_bytes *= 2;
  ExpectInvalid("is sliced on dim");
}

}  // namespace
}  // namespace metaload
