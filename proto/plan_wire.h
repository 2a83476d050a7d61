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

// The bytes of a length-delimited field holding `n` bytes: its tag, its length, the n.
size_t LengthDelimitedFieldSize(uint32_t field, size_t n);
// Only the tag and the length of such a field; the caller appends the n bytes.
void AppendLengthDelimitedHeader(uint32_t field, size_t n, std::string* out);

// What turns a serialized ReadItem of a whole tensor into the slice a rank holds, appended
// after it: size_bytes replaced, and a TensorSlice when `slice_dim` >= 0.
struct ItemTail {
  char bytes[64];
  size_t size = 0;
};
ItemTail SlicedItemTail(uint64_t size_bytes, int32_t slice_dim, int64_t slice_start, int64_t slice_length);

// A RankPlan.items field of `whole_item` followed by `tail`.
void AppendSlicedItem(absl::string_view whole_item, const ItemTail& tail, std::string* out);

// Field numbers of metaload.proto that these bytes are made of.
inline constexpr uint32_t kResponsePlanField = 1;        // GetPlanResponse.plan
inline constexpr uint32_t kResponseAnsweredByField = 3;  // GetPlanResponse.answered_by
inline constexpr uint32_t kPlanRanksField = 4;           // Plan.ranks
inline constexpr uint32_t kRankItemsField = 7;           // RankPlan.items
inline constexpr uint32_t kResponseFilesField = 2;       // GetPlanResponse.files
inline constexpr uint32_t kFileServersField = 4;         // FileSource.servers

}  // namespace metaload

#endif  // METALOAD_PROTO_PLAN_WIRE_H_
