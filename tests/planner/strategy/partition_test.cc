// PartitionContiguous: optimal largest part (checked against brute force), capacities,
// even spreading of the remainder, edge cases.
#include "planner/strategy/strategies/partition.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaload {
namespace {

using ::testing::ElementsAre;

constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();

std::vector<uint64_t> PartSums(const std::vector<uint64_t>& sizes, const std::vector<size_t>& ends) {
  std::vector<uint64_t> sums;
  size_t begin = 0;
  for (size_t end : ends) {
    uint64_t sum = 0;
    for (size_t i = begin; i < end; ++i) sum += sizes[i];
    sums.push_back(sum);
    begin = end;
  }
  return sums;
}

// The smallest largest part over every partition within capacities; kUnlimited if none.
uint64_t BruteForceBest(const std::vector<uint64_t>& sizes, const std::vector<uint64_t>& caps, size_t part,
                        size_t begin) {
  if (part == caps.size()) return begin == sizes.size() ? 0 : kUnlimited;
  uint64_t best = kUnlimited, sum = 0;
  for (size_t end = begin;; ++end) {
    if (sum > caps[part]) break;
    uint64_t rest = BruteForceBest(sizes, caps, part + 1, end);
    if (rest != kUnlimited) best = std::min(best, std::max(sum, rest));
    if (end == sizes.size()) break;
    sum += sizes[end];
  }
  return best;
}

TEST(PartitionTest, EqualSizesSplitEvenly) {
  std::vector<uint64_t> sizes(32, 100);
  std::optional<std::vector<size_t>> ends = PartitionContiguous(sizes, std::vector<uint64_t>(4, kUnlimited));
  ASSERT_TRUE(ends.has_value());
  EXPECT_THAT(*ends, ElementsAre(8, 16, 24, 32));
}

TEST(PartitionTest, RemainderIsSpreadNotPiledOnTheLastPart) {
  std::vector<uint64_t> sizes(10, 1);
  std::optional<std::vector<size_t>> ends = PartitionContiguous(sizes, std::vector<uint64_t>(4, kUnlimited));
  ASSERT_TRUE(ends.has_value());
  std::vector<uint64_t> sums = PartSums(sizes, *ends);
  EXPECT_EQ(*std::max_element(sums.begin(), sums.end()), 3u);
  EXPECT_EQ(*std::min_element(sums.begin(), sums.end()), 2u);
}

TEST(PartitionTest, MorePartsThanSizesLeavesTrailingPartsEmpty) {
  std::vector<uint64_t> sizes = {5, 5, 5};
  std::optional<std::vector<size_t>> ends = PartitionContiguous(sizes, std::vector<uint64_t>(5, kUnlimited));
  ASSERT_TRUE(ends.has_value());
  EXPECT_THAT(*ends, ElementsAre(1, 2, 3, 3, 3));
}

TEST(PartitionTest, LargeFirstSizeStillLeavesNoPartEmpty) {
  std::optional<std::vector<size_t>> ends =
      PartitionContiguous({10, 1, 1}, std::vector<uint64_t>(3, kUnlimited));
  ASSERT_TRUE(ends.has_value());
  EXPECT_THAT(*ends, ElementsAre(1, 2, 3));
}

TEST(PartitionTest, NoSizesGiveEmptyParts) {
  std::optional<std::vector<size_t>> ends = PartitionContiguous({}, std::vector<uint64_t>(3, 10));
  ASSERT_TRUE(ends.has_value());
  EXPECT_THAT(*ends, ElementsAre(0, 0, 0));
}

TEST(PartitionTest, RespectsSmallCapacities) {
  // Balanced would be 2+2 | 2+2, but the first part only holds 2.
  std::vector<uint64_t> sizes = {2, 2, 2, 2};
  std::optional<std::vector<size_t>> ends = PartitionContiguous(sizes, {2, 6});
  ASSERT_TRUE(ends.has_value());
  EXPECT_THAT(*ends, ElementsAre(1, 4));
}

TEST(PartitionTest, ImpossibleWhenASizeExceedsEveryCapacity) {
  EXPECT_FALSE(PartitionContiguous({1, 11, 1}, {10, 10, 10}).has_value());
}

TEST(PartitionTest, ImpossibleWhenOrderWastesCapacity) {
  // 12 bytes in 2 parts of 7: 5+5 cannot share, so the 2 has nowhere to go.
  EXPECT_FALSE(PartitionContiguous({5, 2, 5}, {6, 6}).has_value());
  EXPECT_TRUE(PartitionContiguous({5, 2, 5}, {7, 6}).has_value());
}

TEST(PartitionTest, ZeroSizedEntriesAreHarmless) {
  std::vector<uint64_t> sizes = {0, 4, 0, 0, 4, 0};
  std::optional<std::vector<size_t>> ends = PartitionContiguous(sizes, {4, 4});
  ASSERT_TRUE(ends.has_value());
  EXPECT_EQ(PartSums(sizes, *ends), (std::vector<uint64_t>{4, 4}));
  EXPECT_EQ(ends->back(), sizes.size());
}

TEST(PartitionTest, LargestPartIsOptimalOnRandomInputs) {
  std::mt19937_64 random(42);
  for (int trial = 0; trial < 400; ++trial) {
    const size_t count = random() % 9;
    const size_t parts = 1 + random() % 4;
    std::vector<uint64_t> sizes(count), caps(parts);
    for (uint64_t& s : sizes) s = random() % 20;
    for (uint64_t& c : caps) c = trial % 2 == 0 ? kUnlimited : 10 + random() % 30;
    const uint64_t best = BruteForceBest(sizes, caps, 0, 0);
    std::optional<std::vector<size_t>> ends = PartitionContiguous(sizes, caps);
    ASSERT_EQ(ends.has_value(), best != kUnlimited) << "trial " << trial;
    if (!ends.has_value()) continue;
    ASSERT_EQ(ends->size(), parts);
    EXPECT_EQ(ends->back(), count);
    EXPECT_TRUE(std::is_sorted(ends->begin(), ends->end()));
    std::vector<uint64_t> sums = PartSums(sizes, *ends);
    for (size_t p = 0; p < parts; ++p) EXPECT_LE(sums[p], caps[p]) << "trial " << trial << " part " << p;
    EXPECT_EQ(*std::max_element(sums.begin(), sums.end()), best) << "trial " << trial;
    if (caps[0] == kUnlimited) {  // then a part is empty only once everything is placed
      for (size_t p = 0; p < parts; ++p) {
        if ((p == 0 ? 0 : (*ends)[p - 1]) == (*ends)[p]) {
          EXPECT_EQ((*ends)[p], count) << "trial " << trial;
        }
      }
    }
  }
}

}  // namespace
}  // namespace metaload
