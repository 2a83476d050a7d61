// What a fan-out assignment (planner/plan/fanout.h) costs a cluster, for benchmarks: the bytes
// each rank reads from storage, the bytes that cross each node's link, what the coordinator sends
// each rank of it (PartOf, on the wire as GetPlanResponse.fanout) and the rank then holds, and the
// memory assigning it takes the coordinator (an estimate, before it runs).
//
// Node links are counted as a pipelined collective crosses them (NCCL's ring; what
// bench/simulate.py assumes): a piece enters each node that has a receiving member once, and
// travels a chain from its reader's node through those nodes in ascending order, each node but
// the last forwarding it once. Transfers between ranks of one node cross no link.
#ifndef METALOAD_TESTS_BENCH_FANOUT_COST_H_
#define METALOAD_TESTS_BENCH_FANOUT_COST_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "planner/plan/fanout.h"
#include "planner/plan/plan.h"

namespace metaload::bench {

struct FanoutCost {
  std::vector<uint64_t> storage_bytes;  // per rank
  std::vector<uint64_t> recv_bytes;     // per node, over its link
  std::vector<uint64_t> send_bytes;     // per node, over its link
  size_t groups = 0;
  size_t pieces = 0;
};

// The cost of `fan` on `nodes` nodes. node_of_rank[r]: rank r's node.
FanoutCost CostOfAssignment(const FanoutAssignment& fan, const std::vector<int>& node_of_rank, int nodes);

// Every rank's part, one at a time (a coordinator builds each as its rank asks, and keeps none).
struct PartsCost {
  std::vector<uint64_t> wire_bytes;    // per rank: what its part adds to its GetPlan answer
  std::vector<uint64_t> memory_bytes;  // per rank: the FanoutPart as PartOf builds it (capacities)
  std::vector<uint64_t> groups;        // per rank: the groups it is a member of
  std::vector<uint64_t> neighbours;    // per rank: the ranks it sends to or receives from (chains)
  std::vector<uint64_t> pieces;        // per rank: the pieces it reads, sends or receives
  double ms = 0;                       // all ranks' PartOf and serialization, one after another
  double max_ms = 0;                   // the slowest rank's
};

PartsCost CostOfParts(const FanoutAssignment& fan);

// Bytes of `part` in memory: its vectors' headers and capacities.
uint64_t PartBytes(const FanoutPart& part);

// What AssignFanout on `plan` adds to the peak RSS beyond the plan, estimated from the plan's size
// before it runs, so that a point too large for the machine is skipped rather than run: every
// shareable reference a holder; the distinct pieces at most the items held whole plus the sliced
// references of one replica (replicas hold the same slices). It lay within -21% and +38% of the
// measured peak at every point of docs/performance.md's table.
uint64_t EstimateAssignPeak(const CompactPlan& plan);

}  // namespace metaload::bench

#endif  // METALOAD_TESTS_BENCH_FANOUT_COST_H_
