#include "daemon/plans/plan_fanout.h"

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "daemon/plans/planned_model.h"
#include "util/fs/file_system.h"

namespace metaload {

const absl::StatusOr<FanoutAssignment>& PlanFanout::Get(const PlannedModel& planned) {
  absl::call_once(once_, [&] {
    // Which nodes serve each file: those whose roots hold it (every server, not the few a rank
    // is sent). Asked once per holder of every shared piece (~40 % of the assignment with ordered
    // maps of strings at 671B x 1,024 ranks): one hash lookup of the file, one of the node.
    absl::flat_hash_map<std::string, absl::flat_hash_set<std::string>> nodes_of;
    bool object_store = false;
    const PlanTables& tables = planned.tables;
    for (size_t f = 0; f < tables.files.size() && f < tables.file_servers.size(); ++f) {
      absl::flat_hash_set<std::string>& nodes = nodes_of[tables.files[f].file()];
      for (int m : tables.file_servers[f]) {
        if (m >= 0 && static_cast<size_t>(m) < planned.members.size()) {
          nodes.insert(planned.members[static_cast<size_t>(m)].name);
        }
      }
      object_store = object_store || IsObjectStoreLocation(tables.files[f].path());
    }
    const CanReadFn can_read = [&nodes_of](const std::string& node, const std::string& file) {
      auto found = nodes_of.find(file);
      return found != nodes_of.end() && found->second.contains(node);
    };
    assignment_ = AssignFanout(planned.plan, can_read,
                               object_store ? FanoutScope::kEveryHolder : FanoutScope::kAcrossNodes);
    if (assignment_.ok()) {
      uint64_t held = sizeof(FanoutAssignment) + assignment_->pieces.capacity() * sizeof(FanoutPiece) +
                      assignment_->storage_bytes.capacity() * sizeof(uint64_t);
      for (const auto& g : assignment_->groups) held += sizeof(g) + g.capacity() * sizeof(int);
      for (const auto& row : assignment_->piece_of_item)
        held += sizeof(row) + row.capacity() * sizeof(int32_t);
      held_bytes_.store(held, std::memory_order_relaxed);
    }
  });
  return assignment_;
}

uint64_t FanoutBoundBytes(const CompactPlan& plan) {
  if (plan.world_size < 2) return 0;
  uint64_t refs = 0;
  for (const CompactRank& rank : plan.ranks) refs += rank.refs.size();
  return sizeof(FanoutAssignment) + refs * kFanoutBytesPerRef + plan.ranks.size() * kFanoutBytesPerRank;
}

uint64_t PlanFanout::HeldBytes() const { return held_bytes_.load(std::memory_order_relaxed); }

}  // namespace metaload
