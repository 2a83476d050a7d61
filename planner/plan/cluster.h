// The cluster a plan targets: nodes, each with GPUs of some memory.
// Rank r is placed on the node/GPU slots in node order: node 0's GPUs, then node 1's, ...
#ifndef METALOAD_PLANNER_PLAN_CLUSTER_H_
#define METALOAD_PLANNER_PLAN_CLUSTER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace metaload {

struct NodeSpec {
  std::string name;
  std::string address;  // host:port of its metad; empty offline
  int gpu_count = 0;
  uint64_t gpu_memory_bytes = 0;   // per GPU
  std::vector<std::string> roots;  // checkpoint folders it can read
};

struct RankSlot {
  int rank = 0;
  int node_index = 0;
  int gpu_index = 0;  // within the node
};

// The most ranks a plan has: as many as `metactl plan --gpus` and GetPlan accept. Node GPU
// counts come from configs and membership requests; the world is bounded before any rank
// slot is allocated.
inline constexpr int kMaxWorldSize = 1 << 20;

struct Cluster {
  std::vector<NodeSpec> nodes;
  // Where the nodes' GPU counts and memory come from, so that a refusal names what the user can
  // change: `metactl plan`'s flags (--gpus, --gpu-memory), or the node configs of the joined
  // daemons (`gpus:`, `gpu_memory:`), the cluster `metactl load` and the Python package plan on.
  enum class Origin { kFlags, kNodeConfigs };
  Origin origin = Origin::kFlags;

  // The sum of the nodes' gpu_count (negative counts as 0), saturating at INT_MAX.
  int total_gpus() const;
  // Slots for ranks 0..world_size-1. InvalidArgument when world_size < 1, > total_gpus() or
  // > kMaxWorldSize.
  absl::StatusOr<std::vector<RankSlot>> Slots(int world_size) const;
};

inline constexpr int kDefaultGpusPerNode = 8;
inline constexpr uint64_t kDefaultGpuMemoryBytes = 80ull << 30;

// `--gpus N [--nodes M] [--gpu-memory X]` when there is no cluster file. nodes == 0 means
// ceil(N / 8) nodes of 8 GPUs (the last one may have fewer); otherwise N must divide by M.
// Nodes are named "node0", "node1", ... gpu_memory_bytes must be > 0: pass
// kDefaultGpuMemoryBytes when the flag is absent.
absl::StatusOr<Cluster> MakeUniformCluster(int gpus, int nodes, uint64_t gpu_memory_bytes);

}  // namespace metaload

#endif  // METALOAD_PLANNER_PLAN_CLUSTER_H_
