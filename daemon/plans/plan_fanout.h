// The read-once fan-out of one plan (planner/plan/fanout.h), assigned by the coordinator once,
// on the first rank's ask (GetPlanRequest.fanout), and kept with the plan: each rank is then
// sent its part only (PartOf), so that no rank fetches the whole plan and assigns it itself (at
// 1,024 ranks a 671B model's whole plan is gigabytes per rank: docs/performance.md "The real
// planner at cluster scale").
//
// The rule is the one `metactl load` ranks ran on the whole plan: a holder whose node serves a
// piece's file reads it; the holders on the reader's node read it too, from that node's page
// cache, unless the model lies in an object store (no page cache in between: every holder but the
// reader receives it).
//
//   const absl::StatusOr<FanoutAssignment>& fan = planned.fanout->Get(planned);
//   if (fan.ok()) FanoutPartToProto(PartOf(*fan, rank), response.mutable_fanout());
//
// Thread-safety: Get may be called from several threads; the first assigns, the others wait.
#ifndef METALOAD_DAEMON_PLANS_PLAN_FANOUT_H_
#define METALOAD_DAEMON_PLANS_PLAN_FANOUT_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/status/statusor.h"
#include "planner/plan/fanout.h"

namespace metaload {

struct PlannedModel;

// The most an assignment holds per reference of a rank to an item: one piece_of_item entry, one
// piece and one group membership (a group's members are holders of its pieces); and per rank.
inline constexpr uint64_t kFanoutBytesPerRef = sizeof(int32_t) + sizeof(FanoutPiece) + sizeof(int);
inline constexpr uint64_t kFanoutBytesPerRank = 2 * sizeof(std::vector<int>) + sizeof(uint64_t);
// The most an assignment of `plan` holds (0 for one rank: nothing to share).
uint64_t FanoutBoundBytes(const CompactPlan& plan);

class PlanFanout {
 public:
  // The assignment of `planned` (whose member this is). CPU work, linear in the plan: called
  // from a work queue, never a gRPC thread.
  const absl::StatusOr<FanoutAssignment>& Get(const PlannedModel& planned);
  // What it holds once assigned (0 before): the plan cache counts it.
  uint64_t HeldBytes() const;

 private:
  absl::once_flag once_;
  absl::StatusOr<FanoutAssignment> assignment_ = absl::UnknownError("not assigned");
  std::atomic<uint64_t> held_bytes_{0};
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_PLANS_PLAN_FANOUT_H_
