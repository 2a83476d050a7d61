#include "proto/fanout_wire.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace metaload {

void FanoutPartToProto(const FanoutPart& part, v1::FanoutPart* out) {
  out->mutable_piece_of_item()->Reserve(static_cast<int>(part.piece_of_item.size()));
  for (int32_t p : part.piece_of_item) out->add_piece_of_item(p < 0 ? 0u : static_cast<uint32_t>(p) + 1);
  for (const FanoutPiece& p : part.pieces) {
    v1::FanoutPiece* piece = out->add_pieces();
    piece->set_group(p.group);
    piece->set_reader(p.reader);
    piece->set_size_bytes(p.size_bytes);
  }
  for (size_t g = 0; g < part.groups.size(); ++g) {
    v1::FanoutGroup* group = out->add_groups();
    group->set_id(part.group_ids[g]);
    group->mutable_members()->Add(part.groups[g].begin(), part.groups[g].end());
  }
}

absl::StatusOr<FanoutPart> FanoutPartFromProto(const v1::FanoutPart& proto, int rank, int world_size,
                                               const std::vector<uint64_t>& item_bytes) {
  auto bad = [](auto&&... what) {
    return absl::InvalidArgumentError(absl::StrCat("the fan-out part: ", what...));
  };
  const size_t items = item_bytes.size();
  if (static_cast<size_t>(proto.piece_of_item_size()) != items) {
    return bad(proto.piece_of_item_size(), " items for a plan of ", items);
  }
  // Each piece is one of the rank's items, and each group holds at least one piece: no more of
  // either than items (checked before anything is copied).
  if (static_cast<size_t>(proto.pieces_size()) > items || proto.groups_size() > proto.pieces_size()) {
    return bad(proto.pieces_size(), " pieces and ", proto.groups_size(), " groups for ", items, " items");
  }
  FanoutPart part;
  for (int g = 0; g < proto.groups_size(); ++g) {
    const v1::FanoutGroup& group = proto.groups(g);
    if (group.id() < 0 || (g > 0 && group.id() <= part.group_ids.back())) {
      return bad("group ", g, " has id ", group.id(), ": ids must be ascending from 0");
    }
    const auto& members = group.members();
    const bool ascending =
        std::adjacent_find(members.begin(), members.end(), std::greater_equal<int>()) == members.end();
    if (members.size() < 2 || members.size() > world_size || !ascending || members[0] < 0 ||
        members[members.size() - 1] >= world_size ||
        !std::binary_search(members.begin(), members.end(), rank)) {
      return bad("group ", group.id(), " is not 2 or more ascending ranks of ", world_size, " holding rank ",
                 rank);
    }
    part.group_ids.push_back(group.id());
    part.groups.emplace_back(members.begin(), members.end());
  }
  std::vector<int> uses(static_cast<size_t>(proto.pieces_size()), 0);
  part.piece_of_item.reserve(items);
  for (size_t i = 0; i < items; ++i) {
    const uint32_t wire = proto.piece_of_item(static_cast<int>(i));  // 1 + the piece, 0: none
    if (wire > static_cast<uint32_t>(proto.pieces_size())) {
      return bad("item ", i, " names piece ", int64_t{wire} - 1, " of ", proto.pieces_size());
    }
    const int32_t p = static_cast<int32_t>(wire) - 1;
    if (p >= 0 && proto.pieces(p).size_bytes() != item_bytes[i]) {
      return bad("piece ", p, " is ", proto.pieces(p).size_bytes(), " bytes, its item ", i, " ",
                 item_bytes[i]);
    }
    if (p >= 0) ++uses[static_cast<size_t>(p)];
    part.piece_of_item.push_back(p);
  }
  for (int p = 0; p < proto.pieces_size(); ++p) {
    const v1::FanoutPiece& piece = proto.pieces(p);
    if (uses[static_cast<size_t>(p)] != 1) return bad("piece ", p, " is held by ", uses[p], " items, not 1");
    if (piece.group() < 0 || piece.group() >= proto.groups_size()) {
      return bad("piece ", p, " names group ", piece.group(), " of ", proto.groups_size());
    }
    const std::vector<int>& members = part.groups[static_cast<size_t>(piece.group())];
    if (!std::binary_search(members.begin(), members.end(), piece.reader())) {
      return bad("piece ", p, "'s reader ", piece.reader(), " is not a member of its group");
    }
    part.pieces.push_back(FanoutPiece{piece.group(), piece.reader(), piece.size_bytes()});
  }
  return part;
}

}  // namespace metaload
