#include "planner/plan/cluster.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace metaload {

int Cluster::total_gpus() const {
  int64_t total = 0;
  for (const NodeSpec& node : nodes) {
    total = std::min<int64_t>(total + std::max(node.gpu_count, 0), std::numeric_limits<int>::max());
  }
  return static_cast<int>(total);
}

absl::StatusOr<std::vector<RankSlot>> Cluster::Slots(int world_size) const {
  const int gpus = total_gpus();
  if (world_size < 1 || world_size > gpus) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", world_size, " must be between 1 and the ",
                                                   gpus, " GPUs of the cluster (", nodes.size(), " nodes)"));
  }
  if (world_size > kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", world_size, " is more than the ",
                                                   kMaxWorldSize, " ranks a plan may have"));
  }
  std::vector<RankSlot> slots;
  slots.reserve(world_size);
  for (int node_index = 0; node_index < static_cast<int>(nodes.size()); ++node_index) {
    for (int gpu = 0; gpu < nodes[node_index].gpu_count; ++gpu) {
      if (static_cast<int>(slots.size()) == world_size) return slots;
      slots.push_back(RankSlot{static_cast<int>(slots.size()), node_index, gpu});
    }
  }
  return slots;
}

absl::StatusOr<Cluster> MakeUniformCluster(int gpus, int nodes, uint64_t gpu_memory_bytes) {
  if (gpus < 1) return absl::InvalidArgumentError(absl::StrCat("--gpus must be at least 1 (got ", gpus, ")"));
  if (nodes < 0)
    return absl::InvalidArgumentError(absl::StrCat("--nodes must not be negative (got ", nodes, ")"));
  if (gpu_memory_bytes == 0) return absl::InvalidArgumentError("--gpu-memory must be more than 0 bytes");
  if (nodes > 0 && gpus % nodes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpus ", gpus, " does not divide evenly across --nodes ", nodes));
  }
  const int gpus_per_node = nodes > 0 ? gpus / nodes : kDefaultGpusPerNode;
  const int node_count = nodes > 0 ? nodes : (gpus + kDefaultGpusPerNode - 1) / kDefaultGpusPerNode;
  Cluster cluster;
  cluster.nodes.reserve(node_count);
  int gpus_left = gpus;
  for (int i = 0; i < node_count; ++i) {
    NodeSpec node;
    node.name = absl::StrCat("node", i);
    node.gpu_count = gpus_left < gpus_per_node ? gpus_left : gpus_per_node;
    node.gpu_memory_bytes = gpu_memory_bytes;
    gpus_left -= node.gpu_count;
    cluster.nodes.push_back(std::move(node));
  }
  return cluster;
}

}  // namespace metaload
