// A rank's part of the read-once fan-out on the wire (GetPlanResponse.fanout): what a
// coordinator sends each rank (planner/plan/fanout.h PartOf), and the rank's check of what it
// received. The part decides whom a rank waits for and what it sends, so a wrong one must not
// get past the edge: every index in range, every group a set of ranks that holds this rank and
// the piece's reader, every piece held by exactly one of the rank's items of its size.
//
//   FanoutPartToProto(PartOf(assignment, rank), response.mutable_fanout());   // coordinator
//   ML_ASSIGN_OR_RETURN(FanoutPart part,
//                       FanoutPartFromProto(response.fanout(), rank, world_size, item_bytes));
//
// Thread-safety: plain functions.
#ifndef METALOAD_PROTO_FANOUT_WIRE_H_
#define METALOAD_PROTO_FANOUT_WIRE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/plan/fanout.h"
#include "proto/metaload.pb.h"

namespace metaload {

void FanoutPartToProto(const FanoutPart& part, v1::FanoutPart* out);

// `item_bytes`: the size of each item of the rank's plan, in order. InvalidArgument naming the
// first thing wrong.
absl::StatusOr<FanoutPart> FanoutPartFromProto(const v1::FanoutPart& proto, int rank, int world_size,
                                               const std::vector<uint64_t>& item_bytes);

}  // namespace metaload

#endif  // METALOAD_PROTO_FANOUT_WIRE_H_
