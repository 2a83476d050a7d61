// MakeUniformCluster (the --gpus/--nodes/--gpu-memory shorthand) and rank slots.
#include "planner/plan/cluster.h"

#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaload {
namespace {

using ::testing::HasSubstr;

void ExpectInvalid(const absl::Status& status, const std::string& substring) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(substring));
}

TEST(UniformClusterTest, DefaultsToNodesOfEightGpus) {
  absl::StatusOr<Cluster> cluster = MakeUniformCluster(16, 0, kDefaultGpuMemoryBytes);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_EQ(cluster->nodes.size(), 2u);
  EXPECT_EQ(cluster->nodes[0].name, "node0");
  EXPECT_EQ(cluster->nodes[1].name, "node1");
  EXPECT_EQ(cluster->nodes[1].gpu_count, 8);
  EXPECT_EQ(cluster->nodes[1].gpu_memory_bytes, 80ull << 30);
  EXPECT_EQ(cluster->nodes[1].address, "");
  EXPECT_EQ(cluster->total_gpus(), 16);
}

TEST(UniformClusterTest, LastDefaultNodeHoldsTheRemainder) {
  absl::StatusOr<Cluster> cluster = MakeUniformCluster(12, 0, 1 << 30);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_EQ(cluster->nodes.size(), 2u);
  EXPECT_EQ(cluster->nodes[0].gpu_count, 8);
  EXPECT_EQ(cluster->nodes[1].gpu_count, 4);
  EXPECT_EQ(cluster->total_gpus(), 12);
}

TEST(UniformClusterTest, ExplicitNodesSplitGpusEvenly) {
  absl::StatusOr<Cluster> cluster = MakeUniformCluster(12, 3, 1 << 30);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_EQ(cluster->nodes.size(), 3u);
  for (const NodeSpec& node : cluster->nodes) EXPECT_EQ(node.gpu_count, 4);
  EXPECT_EQ(cluster->nodes[2].name, "node2");
}

TEST(UniformClusterTest, RejectsGpusThatDoNotDivideAcrossNodes) {
  ExpectInvalid(MakeUniformCluster(12, 5, 1 << 30).status(),
                "--gpus 12 does not divide evenly across --nodes 5");
}

TEST(UniformClusterTest, RejectsMoreNodesThanGpus) {
  ExpectInvalid(MakeUniformCluster(2, 4, 1 << 30).status(),
                "--gpus 2 does not divide evenly across --nodes 4");
}

TEST(UniformClusterTest, RejectsNoGpus) {
  ExpectInvalid(MakeUniformCluster(0, 0, 1 << 30).status(), "--gpus must be at least 1 (got 0)");
}

TEST(UniformClusterTest, RejectsNegativeNodes) {
  ExpectInvalid(MakeUniformCluster(8, -1, 1 << 30).status(), "--nodes must not be negative (got -1)");
}

TEST(UniformClusterTest, RejectsZeroGpuMemory) {
  ExpectInvalid(MakeUniformCluster(8, 1, 0).status(), "--gpu-memory must be more than 0 bytes");
}

TEST(ClusterSlotsTest, RanksFillNodesInOrder) {
  Cluster cluster;
  cluster.nodes = {NodeSpec{"a", "", 2, 1, {}}, NodeSpec{"b", "", 0, 1, {}}, NodeSpec{"c", "", 3, 1, {}}};
  absl::StatusOr<std::vector<RankSlot>> slots = cluster.Slots(4);
  ASSERT_TRUE(slots.ok()) << slots.status();
  ASSERT_EQ(slots->size(), 4u);
  const int expected[4][3] = {{0, 0, 0}, {1, 0, 1}, {2, 2, 0}, {3, 2, 1}};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ((*slots)[r].rank, expected[r][0]);
    EXPECT_EQ((*slots)[r].node_index, expected[r][1]) << "rank " << r;
    EXPECT_EQ((*slots)[r].gpu_index, expected[r][2]) << "rank " << r;
  }
  EXPECT_EQ(cluster.Slots(5)->size(), 5u);
}

TEST(ClusterSlotsTest, RejectsWorldSizeOutsideTheCluster) {
  absl::StatusOr<Cluster> cluster = MakeUniformCluster(16, 2, 1 << 30);
  ASSERT_TRUE(cluster.ok());
  ExpectInvalid(cluster->Slots(17).status(),
                "world size 17 must be between 1 and the 16 GPUs of the cluster (2 nodes)");
  ExpectInvalid(cluster->Slots(0).status(), "world size 0 must be between 1 and the 16 GPUs");
}

// Node GPU counts come from node configs and membership requests: their sum saturates instead
// of wrapping to a small or negative world, and no world past kMaxWorldSize gets slots.
TEST(ClusterSlotsTest, HugeGpuCountsNeitherWrapNorAllocate) {
  Cluster cluster;
  cluster.nodes = {NodeSpec{"a", "", std::numeric_limits<int>::max(), 1 << 30, {}},
                   NodeSpec{"b", "", std::numeric_limits<int>::max(), 1 << 30, {}},
                   NodeSpec{"c", "", -5, 1 << 30, {}}};
  EXPECT_EQ(cluster.total_gpus(), std::numeric_limits<int>::max());
  ExpectInvalid(cluster.Slots(std::numeric_limits<int>::max()).status(),
                "world size 2147483647 is more than the 1048576 ranks a plan may have");
  absl::StatusOr<std::vector<RankSlot>> slots = cluster.Slots(kMaxWorldSize);
  ASSERT_TRUE(slots.ok()) << slots.status();
  EXPECT_EQ(slots->size(), static_cast<size_t>(kMaxWorldSize));
}

}  // namespace
}  // namespace metaload
