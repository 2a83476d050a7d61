// Read once, fan out, from a plan: every piece (a tensor, or one slice of it) that several ranks
// hold identically — data-parallel replicas (`replicate`, `tp` with replicas), tensors every
// rank of a tp group holds whole, tp > KV heads — gets exactly one reader cluster-wide; the
// other holders receive its bytes from that reader (client/load/fanout.h), or, with
// FanoutScope::kAcrossNodes, read it too where they share the reader's node.
//
//   ML_ASSIGN_OR_RETURN(FanoutAssignment fan, AssignFanout(plan, can_read));
//   FanoutPart part = PartOf(fan, r);        // what rank r is sent (a coordinator assigns once)
//   for (size_t i = 0; i < plan.ranks[r].items.size(); ++i) {
//     int32_t p = fan.piece_of_item[r][i];   // -1: rank r reads item i itself, unshared
//     if (p >= 0 && fan.pieces[p].reader != r) { /* r receives it over group fan.pieces[p].group */ }
//   }
//
// Pure and deterministic: every rank computes the same assignment from the same plan, with no
// communication. Readers are chosen piece by piece, largest first (ties: the plan's order, rank
// 0's items first), each the holder with the fewest storage bytes so far (its unshared bytes
// included; ties: the fewest on its node, then the lowest rank), among the holders that can
// reach the piece's file when `can_read` says which (all holders when none can); the pieces keep
// the plan's order. Linear in the plan's size but for one sort of the pieces: one hash lookup per
// (rank, item), one pass over each piece's holders.
//
// Thread-safety: a plain function of its arguments.
#ifndef METALOAD_PLANNER_PLAN_FANOUT_H_
#define METALOAD_PLANNER_PLAN_FANOUT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/plan/plan.h"

namespace metaload {

struct FanoutPiece {
  int group = 0;            // index into FanoutAssignment::groups: the ranks that hold it
  int reader = 0;           // the rank that reads it from storage (a member of its group)
  uint64_t size_bytes = 0;  // what each holder holds of it
};

struct FanoutAssignment {
  // Every distinct set of holders (ascending ranks, at least 2), in lexicographic order: the
  // order in which ranks set up and use a process group for each, so that no two ranks wait
  // on each other in opposite orders.
  std::vector<std::vector<int>> groups;
  // Shared pieces, in the plan's order; a group's members exchange its pieces in this order.
  std::vector<FanoutPiece> pieces;
  // [rank][item index in plan.ranks[rank].items]: the piece that item is, or -1 (unshared: no
  // checkpoint bytes, empty, held by this rank alone, or with kAcrossNodes held on the node of
  // the piece's reader).
  std::vector<std::vector<int32_t>> piece_of_item;
  // Per rank: the bytes it reads from storage (unshared items plus the pieces it reads; with
  // kAcrossNodes, its node-mates' reads of those pieces are served by the page cache its read
  // fills, and count for none).
  std::vector<uint64_t> storage_bytes;

  bool empty() const { return pieces.empty(); }
};

// Whether a rank on `node` can read checkpoint file `file` (ReadItem::file) itself (its node
// serves it); readers are preferred among those that can.
using CanReadFn = std::function<bool(const std::string& node, const std::string& file)>;

// Who receives a piece. kAcrossNodes: only holders on other nodes than its reader's; the holders
// on the reader's node read it too, from the page cache that node's first read filled (bytes
// leave storage once per piece either way, and a copy from the page cache beats a Gloo
// transfer on one host: 0.13-0.24 s against 0.59-1.44 s for a 53.5 MB model, 4 ranks).
// kEveryHolder: every holder but the reader (ranks that share no page cache, whatever their
// node says).
enum class FanoutScope { kEveryHolder, kAcrossNodes };

// Whether the plan's shape lets another rank hold any of `rank`'s bytes: replicas, or a group
// whose members all hold a tensor whole (a tp group's norms). A plan of one replica whose rank
// holds only slices (fsdp) shares nothing: its ranks do not ask for a part, and its coordinator
// never assigns one. `rank` is looked up by its number (the plan may list that rank alone);
// false when it is not there.
bool RankMayShare(const Plan& plan, int rank);
bool RankMayShare(const CompactPlan& plan, int rank);

// InvalidArgument when plan.ranks is not ranks 0 .. world_size - 1, once each, in order.
// `can_read` may be empty (every holder can).
absl::StatusOr<FanoutAssignment> AssignFanout(const Plan& plan, const CanReadFn& can_read = {},
                                              FanoutScope scope = FanoutScope::kEveryHolder);
// The same assignment of a plan in its memory-lean form (what a coordinator holds: it assigns
// once per plan and sends each rank its part, PartOf), without expanding it.
absl::StatusOr<FanoutAssignment> AssignFanout(const CompactPlan& plan, const CanReadFn& can_read = {},
                                              FanoutScope scope = FanoutScope::kEveryHolder);

// One rank's part of an assignment: everything that rank needs to take part in the exchange, and
// nothing of the rest, so that what a rank holds grows with its own items and groups, not with
// the cluster (at 671B on 1,024 ranks: a whole assignment holds up to 182 MiB and the whole plan
// it reads is 5.4 GiB on the wire; a rank's part, at most 5.1 MiB, mostly its groups' member
// lists: docs/performance.md "The real planner at cluster scale").
struct FanoutPart {
  std::vector<int32_t> piece_of_item;  // per item of the rank: an index into `pieces`, or -1
  // The rank's pieces in the assignment's order (which its group's members share); each
  // FanoutPiece::group is an index into `groups`.
  std::vector<FanoutPiece> pieces;
  // The rank's groups (ascending ranks) in the assignment's (lexicographic) order, and each one's
  // index among the whole assignment's groups: what names its rendezvous, alike on every member.
  std::vector<std::vector<int>> groups;
  std::vector<int> group_ids;

  bool empty() const { return pieces.empty(); }
};

// `rank`'s part of `fan` (empty for a rank it does not list).
FanoutPart PartOf(const FanoutAssignment& fan, int rank);

// Where `rank` stands in the chain a piece travels down (client/load/fanout_chain.h): from its
// `reader` through its other holders `members` (ascending, both among them) in ascending order,
// wrapped around, so that where a node's ranks are consecutive the piece enters each node once
// and a rank's neighbours are its node-mates and the next node's first rank. prev -1: `rank` is
// the reader; next -1: the chain ends at `rank`.
struct ChainPlace {
  int prev = -1;
  int next = -1;
};
ChainPlace PlaceInChain(const std::vector<int>& members, int reader, int rank);

// A piece one rank holds as a caller knows it without a whole plan (the Python package: the
// local tensor of a DTensor placed Replicate() on a mesh dimension, which every rank of that
// dimension's process group holds alike): its holders (an index into the groups), or -1 when
// unshared, and its bytes.
struct HeldPiece {
  int group = -1;
  uint64_t size_bytes = 0;
  // Read by the previous item's reader (the boxes of one tensor stay with one reader, so that
  // one source says where the whole tensor came from). Only with the previous item's group.
  bool with_previous = false;
};

// The same rule as AssignFanout, group by group, from what this rank holds: every member of a
// group that holds the same pieces in the same order computes the same readers (largest piece
// first, the boxes of one tensor as one, each to the member with the fewest bytes of that group
// so far; ties: request order, then the lowest rank). The caller
// proves that the members agree (client/load/fanout.h does, before any byte moves). `groups`:
// each 2 or more ascending ranks holding `rank`, distinct, in lexicographic order (else
// InvalidArgument). The result's piece_of_item has a row for `rank` only (earlier rows empty).
absl::StatusOr<FanoutAssignment> AssignWithinGroups(int rank, const std::vector<std::vector<int>>& groups,
                                                    const std::vector<HeldPiece>& items);

}  // namespace metaload

#endif  // METALOAD_PLANNER_PLAN_FANOUT_H_
