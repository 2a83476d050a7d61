// SliceByteRanges and SliceSizeBytes against ranges computed by hand, and the plan JSON's
// "slice" key (written only when present, read strictly).
#include "planner/plan/slice.h"

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaload {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A [4, 6] BF16 tensor at offset 100: rows of 12 bytes, 48 bytes in all.
TensorLayout Layout4x6() {
  TensorLayout layout;
  layout.name = "w";
  layout.dtype = DType::kBF16;
  layout.shape = {4, 6};
  layout.file = "model.safetensors";
  layout.begin_offset = 100;
  layout.end_offset = 148;
  return layout;
}

ReadItem Sliced(int dim, int64_t start, int64_t length) {
  ReadItem item;
  item.tensor = "w";
  item.dtype = DType::kBF16;
  item.shape = {4, 6};
  item.slice = TensorSlice{dim, start, length};
  return item;
}

TEST(SliceByteRangesTest, WholeTensorIsItsRange) {
  ReadItem item = Sliced(0, 0, 4);
  item.slice.reset();
  absl::StatusOr<std::vector<ByteRange>> ranges = SliceByteRanges(item, Layout4x6());
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  EXPECT_THAT(*ranges, ElementsAre(ByteRange{100, 48}));
}

TEST(SliceByteRangesTest, DimZeroSliceIsOneContiguousRange) {
  absl::StatusOr<std::vector<ByteRange>> ranges = SliceByteRanges(Sliced(0, 1, 2), Layout4x6());
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  EXPECT_THAT(*ranges, ElementsAre(ByteRange{112, 24}));  // rows 1..2: 100 + 12, 2 x 12 bytes
}

TEST(SliceByteRangesTest, DimOneSliceIsOneRunPerRow) {
  absl::StatusOr<std::vector<ByteRange>> ranges = SliceByteRanges(Sliced(1, 2, 3), Layout4x6());
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  // Columns 2..4 of each 12-byte row: 4 bytes in, 6 bytes long.
  EXPECT_THAT(*ranges,
              ElementsAre(ByteRange{104, 6}, ByteRange{116, 6}, ByteRange{128, 6}, ByteRange{140, 6}));
}

TEST(SliceByteRangesTest, FullWidthSliceOnAnInnerDimCoalesces) {
  absl::StatusOr<std::vector<ByteRange>> ranges = SliceByteRanges(Sliced(1, 0, 6), Layout4x6());
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  EXPECT_THAT(*ranges, ElementsAre(ByteRange{100, 48}));
}

TEST(SliceByteRangesTest, MiddleDimOfThreeDims) {
  TensorLayout layout = Layout4x6();
  layout.shape = {2, 3, 4};  // F32: innermost rows of 16 bytes, 96 bytes in all
  layout.dtype = DType::kF32;
  layout.end_offset = 196;
  ReadItem item = Sliced(1, 1, 1);
  absl::StatusOr<std::vector<ByteRange>> ranges = SliceByteRanges(item, layout);
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  EXPECT_THAT(*ranges, ElementsAre(ByteRange{116, 16}, ByteRange{164, 16}));
  EXPECT_EQ(SliceSizeBytes(layout.shape, layout.dtype, item.slice), 32u);
}

TEST(SliceByteRangesTest, SliceOutsideTheTensorIsRefused) {
  absl::StatusOr<std::vector<ByteRange>> ranges = SliceByteRanges(Sliced(1, 4, 3), Layout4x6());
  ASSERT_FALSE(ranges.ok());
  EXPECT_THAT(std::string(ranges.status().message()), HasSubstr("slice dim 1 [4, +3) is outside [4, 6]"));
}

TEST(SliceByteRangesTest, LayoutRangeThatDoesNotHoldTheShapeIsRefused) {
  TensorLayout layout = Layout4x6();
  layout.end_offset = 140;
  EXPECT_FALSE(SliceByteRanges(Sliced(0, 0, 1), layout).ok());
}

TEST(SliceSizeBytesTest, SliceAndWhole) {
  EXPECT_EQ(SliceSizeBytes({4, 6}, DType::kBF16, std::nullopt), 48u);
  EXPECT_EQ(SliceSizeBytes({4, 6}, DType::kBF16, TensorSlice{1, 0, 3}), 24u);
  EXPECT_EQ(SliceSizeBytes({}, DType::kF32, std::nullopt), 4u);
}

Plan OneSlicePlan() {
  Plan plan;
  plan.model = "m";
  plan.strategy = "tp";
  plan.world_size = 1;
  plan.ranks.resize(1);
  ReadItem item = Sliced(1, 2, 3);
  item.size_bytes = 24;
  item.file = "model.safetensors";
  item.begin_offset = 100;
  item.end_offset = 148;
  plan.ranks[0].items.push_back(item);
  plan.ranks[0].size_bytes = 24;
  return plan;
}

TEST(PlanSliceJsonTest, SliceIsWrittenAndReadBack) {
  const std::string json = PlanToJson(OneSlicePlan());
  EXPECT_THAT(json, HasSubstr("\"slice\": {\"dim\": 1, \"start\": 2, \"length\": 3}"));
  absl::StatusOr<Plan> back = PlanFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->ranks[0].items[0].slice.has_value());
  EXPECT_EQ(*back->ranks[0].items[0].slice, (TensorSlice{1, 2, 3}));
  EXPECT_EQ(PlanToJson(*back), json);
}

TEST(PlanSliceJsonTest, WholeItemsHaveNoSliceKey) {
  Plan plan = OneSlicePlan();
  plan.ranks[0].items[0].slice.reset();
  EXPECT_THAT(PlanToJson(plan), ::testing::Not(HasSubstr("slice")));
}

void ExpectRefused(const std::string& from, const std::string& to, const std::string& message) {
  std::string json = absl::StrReplaceAll(PlanToJson(OneSlicePlan()), {{from, to}});
  absl::StatusOr<Plan> plan = PlanFromJson(json);
  ASSERT_FALSE(plan.ok()) << json;
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr(message));
}

TEST(PlanSliceJsonTest, SliceOutsideTheShapeIsRefused) {
  ExpectRefused("\"length\": 3", "\"length\": 5", "[2, +5) is outside dim 1 of size 6");
}

TEST(PlanSliceJsonTest, SliceDimPastTheShapeIsRefused) {
  ExpectRefused("\"dim\": 1", "\"dim\": 2", "dim 2 but the tensor has 2 dims");
}

TEST(PlanSliceJsonTest, UnknownSliceKeyIsRefused) {
  ExpectRefused("\"length\": 3", "\"length\": 3, \"step\": 1", "step");
}

TEST(PlanSliceJsonTest, MissingSliceKeyIsRefused) { ExpectRefused("\"start\": 2, ", "", "start"); }

TEST(PlanSliceJsonTest, BytesThatDisagreeWithTheSliceAreRefused) {
  ExpectRefused("\"bytes\": 24", "\"bytes\": 48", "\"bytes\" is 48 but its slice holds 24 bytes of BF16");
}

TEST(PlanSliceJsonTest, OffsetsMustHoldTheWholeStoredTensor) {
  ExpectRefused("[100, 148]", "[100, 124]", "offsets [100, 124) do not hold the 48 bytes of BF16 [4, 6]");
}

TEST(SliceRunsTest, DimOneSliceIsEqualStridedRuns) {
  ReadItem item = Sliced(1, 2, 3);
  item.begin_offset = 100;
  item.end_offset = 148;
  item.file = "model.safetensors";
  absl::StatusOr<StridedRuns> runs = ItemRuns(item);
  ASSERT_TRUE(runs.ok()) << runs.status();
  EXPECT_EQ(*runs, (StridedRuns{104, 6, 12, 4}));
  EXPECT_EQ(runs->total_bytes(), 24u);
}

TEST(SliceRunsTest, SliceCoveringItsDimIsOneRun) {
  absl::StatusOr<StridedRuns> runs = SliceRuns(TensorSlice{1, 0, 6}, Layout4x6());
  ASSERT_TRUE(runs.ok()) << runs.status();
  EXPECT_EQ(*runs, (StridedRuns{100, 48, 48, 1}));
}

TEST(SliceRunsTest, EmptySliceHasNoRuns) {
  absl::StatusOr<StridedRuns> runs = SliceRuns(TensorSlice{1, 6, 0}, Layout4x6());
  ASSERT_TRUE(runs.ok()) << runs.status();
  EXPECT_EQ(runs->run_count, 0u);
}

TEST(SliceRunsTest, MiddleDimOfThreeIsOneRunPerOuterIndex) {
  TensorLayout layout;
  layout.name = "experts";
  layout.dtype = DType::kF32;
  layout.shape = {2, 4, 3};  // rows of 12 bytes, 48 per outer index
  layout.begin_offset = 0;
  layout.end_offset = 96;
  absl::StatusOr<StridedRuns> runs = SliceRuns(TensorSlice{1, 2, 2}, layout);
  ASSERT_TRUE(runs.ok()) << runs.status();
  EXPECT_EQ(*runs, (StridedRuns{24, 24, 48, 2}));
}

// A plan converting BF16 to F32 on load counts the held (F32) bytes.
TEST(PlanToDTypeJsonTest, ToDTypeIsWrittenReadBackAndCounted) {
  Plan plan = OneSlicePlan();
  plan.ranks[0].items[0].to_dtype = DType::kF32;
  plan.ranks[0].items[0].size_bytes = 48;
  const std::string json = PlanToJson(plan);
  EXPECT_THAT(json, HasSubstr("\"to_dtype\": \"F32\""));
  absl::StatusOr<Plan> back = PlanFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ranks[0].items[0].to_dtype, DType::kF32);
  EXPECT_EQ(PlanToJson(*back), json);
  absl::StatusOr<Plan> wrong = PlanFromJson(absl::StrReplaceAll(json, {{"\"bytes\": 48", "\"bytes\": 24"}}));
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("holds 48 bytes of F32"));
}

TEST(PlanToDTypeJsonTest, IntegersAreNeverConverted) {
  Plan plan = OneSlicePlan();
  plan.ranks[0].items[0].dtype = DType::kI16;
  plan.ranks[0].items[0].to_dtype = DType::kBF16;
  absl::StatusOr<Plan> back = PlanFromJson(PlanToJson(plan));
  ASSERT_FALSE(back.ok());
  EXPECT_THAT(std::string(back.status().message()), HasSubstr("cannot convert I16 to BF16"));
}

// Each rank's (length, start) along the dim, as ChunkSlice cuts it.
std::vector<std::pair<int64_t, int64_t>> Chunks(int64_t extent, int64_t chunks) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t i = 0; i < chunks; ++i) {
    const TensorSlice slice = ChunkSlice(1, extent, chunks, i);
    EXPECT_EQ(slice.dim, 1);
    out.emplace_back(slice.length, slice.start);
  }
  return out;
}

// The expected values are what torch 2.15 gives:
//   [Shard.local_shard_size_and_offset(n, c, r) for r in range(c)]
// (torch/distributed/tensor/placement_types.py), which DTensor's Shard(dim) uses.
TEST(ChunkSliceTest, UnevenExtentsCutLikeTorchChunkWithEmptyPiecesPastTheEnd) {
  using P = std::pair<int64_t, int64_t>;
  EXPECT_THAT(Chunks(10, 4), ElementsAre(P{3, 0}, P{3, 3}, P{3, 6}, P{1, 9}));
  EXPECT_THAT(Chunks(2, 4), ElementsAre(P{1, 0}, P{1, 1}, P{0, 2}, P{0, 2}));
  EXPECT_THAT(Chunks(5, 4), ElementsAre(P{2, 0}, P{2, 2}, P{1, 4}, P{0, 5}));
  EXPECT_THAT(Chunks(3, 4), ElementsAre(P{1, 0}, P{1, 1}, P{1, 2}, P{0, 3}));
  EXPECT_THAT(Chunks(6, 4), ElementsAre(P{2, 0}, P{2, 2}, P{2, 4}, P{0, 6}));
  EXPECT_THAT(Chunks(320, 3), ElementsAre(P{107, 0}, P{107, 107}, P{106, 214}));
  EXPECT_THAT(Chunks(32002, 4), ElementsAre(P{8001, 0}, P{8001, 8001}, P{8001, 16002}, P{7999, 24003}));
  EXPECT_THAT(Chunks(32002, 8), ElementsAre(P{4001, 0}, P{4001, 4001}, P{4001, 8002}, P{4001, 12003},
                                            P{4001, 16004}, P{4001, 20005}, P{4001, 24006}, P{3995, 28007}));
  const std::vector<P> vocab_128262 = Chunks(128262, 8);
  EXPECT_EQ(vocab_128262[6], (P{16033, 96198}));
  EXPECT_EQ(vocab_128262[7], (P{16031, 112231}));
  const std::vector<P> vocab_131074 = Chunks(131074, 16);
  EXPECT_EQ(vocab_131074[14], (P{8193, 114702}));
  EXPECT_EQ(vocab_131074[15], (P{8179, 122895}));
  EXPECT_THAT(Chunks(1, 3), ElementsAre(P{1, 0}, P{0, 1}, P{0, 1}));
}

TEST(ChunkSliceTest, EvenExtentsCutIntoEqualPieces) {
  using P = std::pair<int64_t, int64_t>;
  EXPECT_THAT(Chunks(8, 4), ElementsAre(P{2, 0}, P{2, 2}, P{2, 4}, P{2, 6}));
  EXPECT_THAT(Chunks(0, 2), ElementsAre(P{0, 0}, P{0, 0}));
  // The largest extent a shape may have still cuts without overflowing.
  const int64_t huge = std::numeric_limits<int64_t>::max() / 2;
  EXPECT_EQ(ChunkSlice(0, huge, 3, 2).start + ChunkSlice(0, huge, 3, 2).length, huge);
}

}  // namespace
}  // namespace metaload

namespace metaload {
namespace {

TensorLayout Layout3(std::vector<int64_t> shape, uint64_t begin = 100) {
  TensorLayout t;
  t.name = "t";
  t.dtype = DType::kBF16;
  t.shape = std::move(shape);
  t.begin_offset = begin;
  t.end_offset = begin + SliceSizeBytes(t.shape, t.dtype, std::nullopt);
  return t;
}

// Every byte offset a box covers, in the box's row-major order, computed the plain way.
std::vector<uint64_t> BoxBytes(const TensorBox& box, const TensorLayout& t) {
  std::vector<uint64_t> out;
  const size_t dims = t.shape.size();
  std::vector<int64_t> i(dims, 0);
  while (true) {
    uint64_t flat = 0;
    for (size_t d = 0; d < dims; ++d) flat = flat * t.shape[d] + (box.start[d] + i[d]);
    for (uint64_t b = 0; b < 2; ++b) out.push_back(t.begin_offset + flat * 2 + b);
    size_t d = dims;
    while (d-- > 0) {
      if (++i[d] < box.length[d]) break;
      i[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) break;
  }
  return out;
}

std::vector<uint64_t> RunBytes(const std::vector<StridedRuns>& runs) {
  std::vector<uint64_t> out;
  for (const StridedRuns& r : runs) {
    for (uint64_t i = 0; i < r.run_count; ++i) {
      for (uint64_t b = 0; b < r.run_bytes; ++b) out.push_back(r.first_offset + i * r.stride_bytes + b);
    }
  }
  return out;
}

TEST(BoxRuns, EveryBoxOfA2DTensorIsOneStridedSeries) {
  const TensorLayout t = Layout3({6, 10});
  for (TensorBox box : {TensorBox{{0, 0}, {6, 10}}, TensorBox{{2, 0}, {3, 10}}, TensorBox{{0, 4}, {6, 3}},
                        TensorBox{{1, 5}, {4, 5}}, TensorBox{{5, 9}, {1, 1}}}) {
    auto runs = BoxRuns(box, t);
    ASSERT_TRUE(runs.ok()) << runs.status();
    EXPECT_EQ(runs->size(), 1u);
    EXPECT_EQ(RunBytes(*runs), BoxBytes(box, t));
  }
}

TEST(BoxRuns, OuterPartialDimensionsGiveOneSeriesEachUnlessTheyContinue) {
  const TensorLayout t = Layout3({4, 5, 6});
  const TensorBox all_partial{{1, 1, 2}, {2, 3, 2}};  // two series, one per dim-0 index
  auto runs = BoxRuns(all_partial, t);
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(runs->size(), 2u);
  EXPECT_EQ(RunBytes(*runs), BoxBytes(all_partial, t));
  const TensorBox middle_whole{{1, 0, 2}, {3, 5, 2}};  // the dim-0 series continue: merged into one
  runs = BoxRuns(middle_whole, t);
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(runs->size(), 1u);
  EXPECT_EQ(RunBytes(*runs), BoxBytes(middle_whole, t));
}

TEST(BoxRuns, EmptyBoxesHaveNoBytesAndBadBoxesAreRefused) {
  const TensorLayout t = Layout3({3, 8});
  auto empty = BoxRuns(TensorBox{{3, 0}, {0, 8}}, t);  // an uneven shard past the end, as DTensor gives
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(BoxRuns(TensorBox{{2, 0}, {2, 8}}, t).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BoxRuns(TensorBox{{0}, {3}}, t).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace metaload
