#include "tests/bench/fanout_cost.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "proto/fanout_wire.h"
#include "proto/metaload.pb.h"

namespace metaload::bench {
namespace {

// The estimate's cost per reference (its row entry), per shareable reference (a holder and its item
// index, vectors doubling; a member of the piece's group) and per distinct piece (its candidate,
// two small vectors, its hash slot, its choice): fitted to the peak RSS AssignFanout added at 405B
// and 671B on 8-32 nodes (17 bytes a holder, 157 a piece), rounded up.
constexpr double kPeakPerRef = 4;
constexpr double kPeakPerHolder = 24;
constexpr double kPeakPerPiece = 170;

// The piece's bytes over each node's link as it travels down its chain (PlaceInChain): a hop
// between two nodes leaves one and enters the other.
void AddPieceTraffic(int reader, const std::vector<int>& members, uint64_t size_bytes,
                     const std::vector<int>& node_of_rank, FanoutCost* cost) {
  for (int at = reader, next = PlaceInChain(members, reader, at).next; next >= 0;
       at = next, next = PlaceInChain(members, reader, at).next) {
    const int from = node_of_rank[static_cast<size_t>(at)];
    const int to = node_of_rank[static_cast<size_t>(next)];
    if (from == to) continue;
    cost->send_bytes[static_cast<size_t>(from)] += size_bytes;
    cost->recv_bytes[static_cast<size_t>(to)] += size_bytes;
  }
}

}  // namespace

FanoutCost CostOfAssignment(const FanoutAssignment& fan, const std::vector<int>& node_of_rank, int nodes) {
  FanoutCost cost;
  cost.storage_bytes = fan.storage_bytes;
  cost.recv_bytes.assign(static_cast<size_t>(nodes), 0);
  cost.send_bytes.assign(static_cast<size_t>(nodes), 0);
  cost.groups = fan.groups.size();
  cost.pieces = fan.pieces.size();
  for (const FanoutPiece& piece : fan.pieces) {
    AddPieceTraffic(piece.reader, fan.groups[static_cast<size_t>(piece.group)], piece.size_bytes,
                    node_of_rank, &cost);
  }
  return cost;
}

uint64_t PartBytes(const FanoutPart& part) {
  uint64_t bytes = sizeof(FanoutPart) + part.piece_of_item.capacity() * sizeof(int32_t) +
                   part.pieces.capacity() * sizeof(FanoutPiece) +
                   part.groups.capacity() * sizeof(std::vector<int>) +
                   part.group_ids.capacity() * sizeof(int);
  for (const std::vector<int>& g : part.groups) bytes += g.capacity() * sizeof(int);
  return bytes;
}

PartsCost CostOfParts(const FanoutAssignment& fan) {
  PartsCost cost;
  for (size_t r = 0; r < fan.piece_of_item.size(); ++r) {
    const auto start = std::chrono::steady_clock::now();
    const FanoutPart part = PartOf(fan, static_cast<int>(r));
    // The coordinator appends a GetPlanResponse with the part in `fanout` to the rank's answer
    // (serialized messages concatenated merge): its size is what the part adds on the wire.
    v1::GetPlanResponse flags;
    FanoutPartToProto(part, flags.mutable_fanout());
    cost.wire_bytes.push_back(flags.SerializeAsString().size());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    cost.ms += ms;
    cost.max_ms = std::max(cost.max_ms, ms);
    cost.memory_bytes.push_back(PartBytes(part));
    cost.groups.push_back(part.groups.size());
    std::set<int> neighbours;
    for (const FanoutPiece& piece : part.pieces) {
      const ChainPlace place =
          PlaceInChain(part.groups[static_cast<size_t>(piece.group)], piece.reader, static_cast<int>(r));
      if (place.prev >= 0) neighbours.insert(place.prev);
      if (place.next >= 0) neighbours.insert(place.next);
    }
    cost.neighbours.push_back(neighbours.size());
    cost.pieces.push_back(part.pieces.size());
  }
  return cost;
}

uint64_t EstimateAssignPeak(const CompactPlan& plan) {
  uint64_t refs = 0, holders = 0, sliced = 0;
  std::vector<bool> whole(plan.items.size(), false);
  for (const CompactRank& rank : plan.ranks) {
    refs += rank.refs.size();
    for (const ItemRef& ref : rank.refs) {
      const ReadItem& item = plan.items[ref.item];
      if (item.file.empty() || item.missing || item.dequantize.has_value() || ref.size_bytes == 0) continue;
      ++holders;
      if (ref.slice_dim < 0) {
        whole[ref.item] = true;
      } else {
        ++sliced;
      }
    }
  }
  const double pieces = static_cast<double>(std::count(whole.begin(), whole.end(), true)) +
                        static_cast<double>(sliced) / std::max(1, plan.replicas);
  return static_cast<uint64_t>(kPeakPerRef * static_cast<double>(refs) +
                               kPeakPerHolder * static_cast<double>(holders) + kPeakPerPiece * pieces);
}

}  // namespace metaload::bench
