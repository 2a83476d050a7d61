#include "client/verify/tensor_proof.h"

#include <iterator>

#include "absl/strings/str_cat.h"

namespace metaload {

TensorProof ProofTemplate(const TensorLayout& stored) {
  TensorProof proof;
  proof.stored = stored.name;
  proof.index = stored.index;
  proof.digest = stored.digest;
  if (stored.digest.has_value() && stored.digest->tile_bytes > 0) {
    proof.tile_count = stored.size_bytes() / stored.digest->tile_bytes;
  }
  proof.sum.kind = stored.digest.has_value() ? stored.digest->kind : DigestKind::kNone;
  proof.sum.lanes.assign(LaneCount(proof.sum.kind), 0);
  return proof;
}

const char* ContentStateName(ContentState state) {
  static constexpr const char* kNames[] = {"checked", "no_digest", "unproven", "mismatch"};  // enum order
  const size_t i = static_cast<size_t>(state);
  return i < std::size(kNames) ? kNames[i] : "no_digest";
}

ContentVerdict JudgeSlot(const TensorProof& mine, const SlotSum& all) {
  if (!mine.digest.has_value()) return {ContentState::kNoDigest, ""};
  if (mine.tile_count == 0) return {ContentState::kChecked, ""};  // no bytes: nothing to differ
  const TensorDigest& digest = *mine.digest;
  if (all.cut > 0) {
    return {
        ContentState::kUnproven,
        absl::StrCat("the ranks' split of it cuts ", all.cut, " of its digest tiles (", digest.tile_bytes,
                     " bytes each, ", mine.tile_count,
                     " in all): no rank held those whole to hash them; a split of the last dimension into "
                     "equal parts that divide its tiles' count per row keeps every tile whole")};
  }
  if (all.hashed == 0 || all.hashed % mine.tile_count != 0) {
    return {ContentState::kUnproven,
            absl::StrCat("the ranks hashed ", all.hashed, " tiles of its ", mine.tile_count,
                         ": not whole copies of it (some part of it was loaded by no "
                         "rank, or by more ranks than the rest)")};
  }
  const uint64_t copies = all.hashed / mine.tile_count;
  const std::vector<uint16_t> expected = ScaleLanes(LanesFromBytes(digest.kind, digest.lanes), copies);
  if (all.lanes == expected) return {ContentState::kChecked, ""};
  return {ContentState::kMismatch,
          absl::StrCat("bytes differ from the digest registered for it (", DigestKindName(digest.kind), " ",
                       LanesForMessage(digest.kind, LanesFromBytes(digest.kind, digest.lanes)), "; the ",
                       copies, copies == 1 ? " copy" : " copies", " loaded sum to ",
                       LanesForMessage(digest.kind, all.lanes),
                       copies == 1 ? ")"
                                   : absl::StrCat(", ", copies, " times the digest would be ",
                                                  LanesForMessage(digest.kind, expected), ")"))};
}

}  // namespace metaload
