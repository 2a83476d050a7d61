// A rank's GetPlanResponse written as bytes from pieces serialized once per plan, and the
// field a node agent appends when it forwards one. A coordinator answers the 1,024 ranks of a
// job from one plan: building each answer as protobuf messages cost 1.6 ms of CPU per fsdp
// rank of a 405B model (1,139 items); concatenating pre-serialized items costs a memcpy.
//
// The bytes are an ordinary serialized GetPlanResponse. They rely on two rules of the
// protobuf wire format: fields may come in any order, and when a scalar field appears twice
// the last value wins — so an item serialized whole, followed by its slice's size_bytes and
// slice, reads as the sliced item, and an agent's answered_by appended to a coordinator's
// response replaces it. Typed stubs parse them as usual.
#ifndef METALOAD_PROTO_PLAN_WIRE_H_
#define METALOAD_PROTO_PLAN_WIRE_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace metaload {

void AppendVarintField(uint32_t field, uint64_t value, std::string* out);
void AppendLengthDelimitedField(uint32_t field, absl::string_view bytes, std::string* out);

// The serialized ReadItem `whole_item` (all of a tensor) as the slice a rank holds:
// size_bytes replaced, and a TensorSlice when `slice_dim` >= 0.
void AppendSlicedItem(absl::string_view whole_item, uint64_t size_bytes, int32_t slice_dim, int64_t slice_start,
                      int64_t slice_length, std::string* out);

// Field numbers of metaload.proto that these bytes are made of.
inline constexpr uint32_t kResponsePlanField = 1;       // GetPlanResponse.plan
inline constexpr uint32_t kResponseAnsweredByField = 3;  // GetPlanResponse.answered_by
inline constexpr uint32_t kPlanRanksField = 4;          // Plan.ranks
inline constexpr uint32_t kRankItemsField = 7;          // RankPlan.items

}  // namespace metaload

#endif  // METALOAD_PROTO_PLAN_WIRE_H_
