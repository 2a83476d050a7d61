#include "planner/plan/fanout.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace metaload {
namespace {

// What makes two ranks' items the same bytes: the stored tensor's range, the slice, and the
// dtype it is held in (a conversion on load is part of what is sent).
std::string PieceKey(const ReadItem& item) {
  std::string key =
      absl::StrCat(item.tensor, std::string(1, '\0'), item.file, std::string(1, '\0'), item.begin_offset, ":",
                   item.end_offset, ":", static_cast<int>(LoadDType(item)));
  if (item.slice.has_value()) {
    absl::StrAppend(&key, ":", item.slice->dim, ":", item.slice->start, ":", item.slice->length);
  }
  return key;
}

// A dequantized value (`dequantize` set, no `file` of its own) is never a piece: each replica reads
// and proves its own codes and scales. A received piece is proven by the digest terms of the stored
// bytes it is (client/load/fanout_fill.cc), but a dequantized value's bytes are computed, not
// stored: its receivers could prove nothing of the codes and scales it came from, and the digest
// sum would count fewer copies of them than holders. Sending the codes and scales instead would
// need a fill path of its own; the simple safe choice costs each replica its codes (half of the BF16
// values) and its scales.
bool Shareable(const ReadItem& whole, uint64_t held_bytes) {
  return !whole.file.empty() && !whole.missing && held_bytes > 0 && !whole.dequantize.has_value();
}

// The one rule for who reads a shared piece: among its holders (ascending), those that can reach
// it first, then the fewest bytes so far, then the fewest on its node, then the lowest rank.
// `reaches(k)`, `load(k)`, `node_load(k)`: of holders[k]. (The node's bytes spread the first,
// largest pieces, when every rank has read nothing yet, over the nodes instead of onto ranks
// 0..G-1 of one node.)
template <typename Reaches, typename Load, typename NodeLoad>
int PickReader(const std::vector<int>& holders, const Reaches& reaches, const Load& load,
               const NodeLoad& node_load) {
  int best = -1;
  bool best_reaches = false;
  uint64_t best_load = 0, best_node_load = 0;
  for (size_t k = 0; k < holders.size(); ++k) {
    const bool r = reaches(k);
    const uint64_t l = load(k);
    const uint64_t n = node_load(k);
    if (best < 0 || (r && !best_reaches) ||
        (r == best_reaches && (l < best_load || (l == best_load && n < best_node_load)))) {
      best = holders[k];
      best_reaches = r;
      best_load = l;
      best_node_load = n;
    }
  }
  return best;
}

// `indices` reordered largest `size_of(index)` first (ties: as given): the order both assignments
// choose readers in, so that the last, smallest pieces even out what the big ones left uneven
// (in the plan's order the largest tensors, embeddings and heads, came last, onto readers
// already as loaded as the others: at 671B replicate on 128 x 8 the busiest rank read 2.4 times
// the mean).
template <typename SizeOf>
std::vector<size_t> LargestFirst(std::vector<size_t> indices, const SizeOf& size_of) {
  std::stable_sort(indices.begin(), indices.end(),
                   [&](size_t a, size_t b) { return size_of(a) > size_of(b); });
  return indices;
}

}  // namespace

absl::StatusOr<FanoutAssignment> AssignWithinGroups(int rank, const std::vector<std::vector<int>>& groups,
                                                    const std::vector<HeldPiece>& items) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<int>& members = groups[g];
    const bool ascending =
        std::adjacent_find(members.begin(), members.end(), std::greater_equal<int>()) == members.end();
    if (members.size() < 2 || !ascending || members.front() < 0 ||
        !std::binary_search(members.begin(), members.end(), rank)) {
      return absl::InvalidArgumentError(
          absl::StrCat("fan-out: group ", g, " is not 2 or more ascending ranks ", "holding rank ", rank));
    }
    if (g > 0 && !(groups[g - 1] < members)) {
      return absl::InvalidArgumentError(absl::StrCat("fan-out: groups ", g - 1, " and ", g,
                                                     " are not distinct and in lexicographic order"));
    }
  }
  if (rank < 0) return absl::InvalidArgumentError(absl::StrCat("fan-out: rank ", rank));
  FanoutAssignment out;
  out.groups = groups;
  out.piece_of_item.resize(static_cast<size_t>(rank) + 1);
  std::vector<int32_t>& mine = out.piece_of_item[static_cast<size_t>(rank)];
  mine.assign(items.size(), -1);
  // Units: an item, with the items after it that go with it (the boxes of one tensor); a unit's
  // reader is chosen largest unit first (ties: request order), as AssignFanout chooses.
  struct Unit {
    size_t first = 0;
    size_t end = 0;
    uint64_t size_bytes = 0;
    int reader = -1;
  };
  constexpr size_t kUnshared = std::numeric_limits<size_t>::max();
  std::vector<Unit> units;
  std::vector<size_t> unit_of(items.size(), kUnshared);
  for (size_t i = 0; i < items.size(); ++i) {
    const HeldPiece& item = items[i];
    if (item.group < 0 || item.size_bytes == 0) continue;
    if (static_cast<size_t>(item.group) >= groups.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("fan-out: item ", i, " names group ", item.group, " of ", groups.size()));
    }
    const bool joins = item.with_previous && !units.empty() && units.back().end == i &&
                       items[units.back().first].group == item.group;
    if (!joins) units.push_back(Unit{i, i, 0, -1});
    units.back().end = i + 1;
    units.back().size_bytes += item.size_bytes;
    unit_of[i] = units.size() - 1;
  }
  std::vector<size_t> every_unit(units.size());
  for (size_t u = 0; u < units.size(); ++u) every_unit[u] = u;
  std::vector<std::vector<uint64_t>> load(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) load[g].assign(groups[g].size(), 0);
  for (size_t u : LargestFirst(std::move(every_unit), [&](size_t u) { return units[u].size_bytes; })) {
    const size_t g = static_cast<size_t>(items[units[u].first].group);
    const std::vector<int>& members = groups[g];
    units[u].reader = PickReader(
        members, [](size_t) { return true; }, [&](size_t k) { return load[g][k]; }, [](size_t) { return 0; });
    const size_t k = static_cast<size_t>(std::lower_bound(members.begin(), members.end(), units[u].reader) -
                                         members.begin());
    load[g][k] += units[u].size_bytes;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (unit_of[i] == kUnshared) continue;
    mine[i] = static_cast<int32_t>(out.pieces.size());
    out.pieces.push_back(FanoutPiece{items[i].group, units[unit_of[i]].reader, items[i].size_bytes});
  }
  return out;
}

namespace {

// AssignFanout's plan, whichever form it comes in: rank r's item i as the stored tensor's whole
// item (`Whole`), the bytes that rank holds of it (`Size`) and what makes two ranks' items the same
// bytes (`Key`).
struct ExpandedView {
  const Plan& plan;
  size_t Ranks() const { return plan.ranks.size(); }
  int RankId(size_t r) const { return plan.ranks[r].rank; }
  const std::string& Node(size_t r) const { return plan.ranks[r].node; }
  size_t Items(size_t r) const { return plan.ranks[r].items.size(); }
  const ReadItem& Whole(size_t r, size_t i) const { return plan.ranks[r].items[i]; }
  uint64_t Size(size_t r, size_t i) const { return plan.ranks[r].items[i].size_bytes; }
  std::string Key(size_t r, size_t i) const { return PieceKey(plan.ranks[r].items[i]); }
  // The item is a whole stored tensor read from a file (what any member of a tp group holds alike).
  bool WholeFromFile(size_t r, size_t i) const {
    const ReadItem& item = plan.ranks[r].items[i];
    return !item.file.empty() && !item.slice.has_value();
  }
};

// In a compact plan an item's index names its tensor, file, offsets and held dtype: the index and
// the slice are the key.
struct CompactKey {
  uint32_t item = 0;
  int32_t dim = -1;
  int64_t start = 0;
  int64_t length = 0;
  bool operator==(const CompactKey& o) const {
    return item == o.item && dim == o.dim && start == o.start && length == o.length;
  }
  template <typename H>
  friend H AbslHashValue(H h, const CompactKey& k) {
    return H::combine(std::move(h), k.item, k.dim, k.start, k.length);
  }
};

struct CompactView {
  const CompactPlan& plan;
  size_t Ranks() const { return plan.ranks.size(); }
  int RankId(size_t r) const { return plan.ranks[r].rank; }
  const std::string& Node(size_t r) const { return plan.ranks[r].node; }
  size_t Items(size_t r) const { return plan.ranks[r].refs.size(); }
  const ReadItem& Whole(size_t r, size_t i) const { return plan.items[plan.ranks[r].refs[i].item]; }
  uint64_t Size(size_t r, size_t i) const { return plan.ranks[r].refs[i].size_bytes; }
  CompactKey Key(size_t r, size_t i) const {
    const ItemRef& ref = plan.ranks[r].refs[i];
    return ref.slice_dim < 0 ? CompactKey{ref.item, -1, 0, 0}
                             : CompactKey{ref.item, ref.slice_dim, ref.slice_start, ref.slice_length};
  }
  bool WholeFromFile(size_t r, size_t i) const {
    const ItemRef& ref = plan.ranks[r].refs[i];
    return ref.slice_dim < 0 && ref.item < plan.items.size() && !plan.items[ref.item].file.empty();
  }
};

// The one rule of AssignFanout, over either form of a plan.
template <typename View, typename KeyType>
absl::StatusOr<FanoutAssignment> Assign(const View& plan, int world_size, const CanReadFn& can_read,
                                        FanoutScope scope) {
  const size_t world = plan.Ranks();
  if (static_cast<int64_t>(world) != world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("fan-out: the plan lists ", world, " ranks for world size ", world_size));
  }
  for (size_t r = 0; r < world; ++r) {
    if (plan.RankId(r) != static_cast<int>(r)) {
      return absl::InvalidArgumentError(
          absl::StrCat("fan-out: ranks[", r, "] is rank ", plan.RankId(r), ", expected ", r));
    }
  }
  // Pass 1: every shareable item's holders, in the plan's order (ranks ascending by construction).
  struct Candidate {
    std::vector<int> holders;
    std::vector<size_t> items;  // the item's index on each holder
    uint64_t size_bytes = 0;
  };
  std::vector<Candidate> candidates;
  absl::flat_hash_map<KeyType, size_t> index_of;
  FanoutAssignment out;
  out.piece_of_item.resize(world);
  for (size_t r = 0; r < world; ++r) {
    out.piece_of_item[r].assign(plan.Items(r), -1);
    for (size_t i = 0; i < plan.Items(r); ++i) {
      if (!Shareable(plan.Whole(r, i), plan.Size(r, i))) continue;
      auto [it, inserted] = index_of.try_emplace(plan.Key(r, i), candidates.size());
      if (inserted) candidates.push_back(Candidate{{}, {}, plan.Size(r, i)});
      Candidate& c = candidates[it->second];
      // The same bytes twice on one rank: its second item is read on its own.
      if (!c.holders.empty() && c.holders.back() == static_cast<int>(r)) continue;
      c.holders.push_back(static_cast<int>(r));
      c.items.push_back(i);
    }
  }
  // Pass 2: each rank's unshared bytes.
  out.storage_bytes.assign(world, 0);
  for (size_t r = 0; r < world; ++r) {
    for (size_t i = 0; i < plan.Items(r); ++i) {
      if (!plan.Whole(r, i).file.empty()) out.storage_bytes[r] += plan.Size(r, i);
    }
  }
  for (const Candidate& c : candidates) {
    if (c.holders.size() < 2) continue;
    for (int h : c.holders) out.storage_bytes[static_cast<size_t>(h)] -= c.size_bytes;
  }
  // Pass 3: each shared piece, largest first (ties: the plan's order), to its least loaded holder
  // (that can reach it, when known); with kAcrossNodes, the holders on the reader's node read it
  // too, and only the others receive it.
  struct Chosen {
    int reader = 0;
    std::vector<int> members;  // ascending: the reader and every holder that receives
  };
  std::vector<size_t> shared;
  for (size_t ci = 0; ci < candidates.size(); ++ci) {
    if (candidates[ci].holders.size() >= 2) shared.push_back(ci);
  }
  std::vector<Chosen> chosen(candidates.size());  // by candidate; members empty: not shared
  // Each rank's node as a number, and the bytes each node's readers read so far.
  std::vector<size_t> node_of(world, 0);
  absl::flat_hash_map<std::string, size_t> node_number;
  for (size_t r = 0; r < world; ++r)
    node_of[r] = node_number.try_emplace(plan.Node(r), node_number.size()).first->second;
  std::vector<uint64_t> node_bytes(node_number.size(), 0);
  for (size_t r = 0; r < world; ++r) node_bytes[node_of[r]] += out.storage_bytes[r];
  for (size_t ci : LargestFirst(std::move(shared), [&](size_t ci) { return candidates[ci].size_bytes; })) {
    const Candidate& c = candidates[ci];
    const int best = PickReader(
        c.holders,
        [&](size_t k) {
          const size_t h = static_cast<size_t>(c.holders[k]);
          return !can_read || can_read(plan.Node(h), plan.Whole(h, c.items[k]).file);
        },
        [&](size_t k) { return out.storage_bytes[static_cast<size_t>(c.holders[k])]; },
        [&](size_t k) { return node_bytes[node_of[static_cast<size_t>(c.holders[k])]]; });
    const size_t reader_node = node_of[static_cast<size_t>(best)];
    node_bytes[reader_node] += c.size_bytes;
    Chosen pick{best, {}};
    // The reader's node-mates read from the page cache its read fills: not storage bytes.
    out.storage_bytes[static_cast<size_t>(best)] += c.size_bytes;
    for (int h : c.holders) {
      const bool reads_too =
          h != best && scope == FanoutScope::kAcrossNodes && node_of[static_cast<size_t>(h)] == reader_node;
      if (!reads_too) pick.members.push_back(h);
    }
    if (pick.members.size() > 1) chosen[ci] = std::move(pick);
  }
  // Pass 4: distinct member sets, numbered in lexicographic order; the pieces in the plan's order.
  std::map<std::vector<int>, int> group_of;
  for (const Chosen& pick : chosen) {
    if (!pick.members.empty()) group_of.emplace(pick.members, 0);
  }
  for (auto& [ranks, id] : group_of) {
    id = static_cast<int>(out.groups.size());
    out.groups.push_back(ranks);
  }
  for (size_t ci = 0; ci < candidates.size(); ++ci) {
    const Chosen& pick = chosen[ci];
    if (pick.members.empty()) continue;
    const Candidate& c = candidates[ci];
    const int32_t piece = static_cast<int32_t>(out.pieces.size());
    out.pieces.push_back(FanoutPiece{group_of.at(pick.members), pick.reader, c.size_bytes});
    for (size_t k = 0; k < c.holders.size(); ++k) {
      if (std::binary_search(pick.members.begin(), pick.members.end(), c.holders[k])) {
        out.piece_of_item[static_cast<size_t>(c.holders[k])][c.items[k]] = piece;
      }
    }
  }
  return out;
}

// The index of `rank` among the plan's ranks: listed in order (a whole plan: ranks[r] is rank r),
// or one rank's part of one.
template <typename View>
std::optional<size_t> IndexOfRank(const View& plan, int rank) {
  if (rank >= 0 && static_cast<size_t>(rank) < plan.Ranks() &&
      plan.RankId(static_cast<size_t>(rank)) == rank) {
    return static_cast<size_t>(rank);
  }
  for (size_t r = 0; r < plan.Ranks(); ++r) {
    if (plan.RankId(r) == rank) return r;
  }
  return std::nullopt;
}

// RankMayShare's rule over either form of a plan.
template <typename View>
bool MayShare(const View& view, int rank) {
  const std::optional<size_t> r = IndexOfRank(view, rank);
  if (!r.has_value() || view.plan.world_size < 2) return false;
  if (view.plan.replicas > 1) return true;
  if (view.plan.group_size < 2) return false;
  for (size_t i = 0; i < view.Items(*r); ++i) {
    if (view.WholeFromFile(*r, i)) return true;
  }
  return false;
}

}  // namespace

bool RankMayShare(const Plan& plan, int rank) { return MayShare(ExpandedView{plan}, rank); }

bool RankMayShare(const CompactPlan& plan, int rank) { return MayShare(CompactView{plan}, rank); }

absl::StatusOr<FanoutAssignment> AssignFanout(const Plan& plan, const CanReadFn& can_read,
                                              FanoutScope scope) {
  return Assign<ExpandedView, std::string>(ExpandedView{plan}, plan.world_size, can_read, scope);
}

absl::StatusOr<FanoutAssignment> AssignFanout(const CompactPlan& plan, const CanReadFn& can_read,
                                              FanoutScope scope) {
  return Assign<CompactView, CompactKey>(CompactView{plan}, plan.world_size, can_read, scope);
}

ChainPlace PlaceInChain(const std::vector<int>& members, int reader, int rank) {
  const auto index = [&members](int r) {
    return static_cast<size_t>(std::lower_bound(members.begin(), members.end(), r) - members.begin());
  };
  const size_t n = members.size();
  const size_t me = index(rank);
  const size_t at = (me + n - index(reader)) % n;  // this rank's place, the reader's 0
  ChainPlace place;
  if (at > 0) place.prev = members[(me + n - 1) % n];
  if (at + 1 < n) place.next = members[(me + 1) % n];
  return place;
}

FanoutPart PartOf(const FanoutAssignment& fan, int rank) {
  FanoutPart part;
  if (rank < 0 || static_cast<size_t>(rank) >= fan.piece_of_item.size()) return part;
  const std::vector<int32_t>& mine = fan.piece_of_item[static_cast<size_t>(rank)];
  // This rank's pieces and groups, renumbered in the assignment's order (which every member
  // shares: a group's pieces go in it, and groups are taken in it).
  std::vector<int32_t> pieces;
  for (int32_t p : mine) {
    if (p >= 0) pieces.push_back(p);
  }
  std::sort(pieces.begin(), pieces.end());
  pieces.erase(std::unique(pieces.begin(), pieces.end()), pieces.end());
  std::vector<int> groups;
  for (int32_t p : pieces) groups.push_back(fan.pieces[static_cast<size_t>(p)].group);
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  for (int g : groups) {
    part.groups.push_back(fan.groups[static_cast<size_t>(g)]);
    part.group_ids.push_back(g);
  }
  for (int32_t p : pieces) {
    FanoutPiece piece = fan.pieces[static_cast<size_t>(p)];
    piece.group =
        static_cast<int>(std::lower_bound(groups.begin(), groups.end(), piece.group) - groups.begin());
    part.pieces.push_back(piece);
  }
  part.piece_of_item.reserve(mine.size());
  for (int32_t p : mine) {
    part.piece_of_item.push_back(
        p < 0 ? -1
              : static_cast<int32_t>(std::lower_bound(pieces.begin(), pieces.end(), p) - pieces.begin()));
  }
  return part;
}

}  // namespace metaload
