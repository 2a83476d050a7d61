#include "planner/strategy/hf_device_map.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/strategy/strategy_registry.h"
#include "util/json/json_util.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// A name to place: a skeleton tensor or a tied alias, with its unit and GPU.
struct Placed {
  std::string name;
  std::string unit;
  int gpu = 0;
};

// The strategies whose plans a device_map can say, for the refusal: "--strategy layers".
std::string DeviceMapStrategies() {
  std::string names;
  for (const Strategy* strategy : Strategies()) {
    if (strategy->not_a_device_map.empty())
      absl::StrAppend(&names, names.empty() ? "--strategy " : " or ", strategy->name);
  }
  return names;
}

absl::Status CheckWholeModulesOnOneNode(const Plan& plan) {
  const Strategy* strategy = FindStrategy(plan.strategy);
  if (strategy == nullptr || !strategy->not_a_device_map.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--format hf-device-map needs ", DeviceMapStrategies(),
                     ": transformers' device_map puts each module whole on one device, and a ", plan.strategy,
                     " plan ", strategy != nullptr ? strategy->not_a_device_map : kSplitsTensorsAcrossRanks));
  }
  std::vector<std::string> nodes;
  for (const RankPlan& rank : plan.ranks) {
    if (std::find(nodes.begin(), nodes.end(), rank.node) == nodes.end()) nodes.push_back(rank.node);
  }
  if (nodes.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--format hf-device-map is for one node, and the plan spans ", nodes.size(), " (",
        absl::StrJoin(nodes, ", "),
        "): transformers' device_map places modules on the GPUs of one host; plan with --nodes 1"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<HfDeviceMapEntry>> HfDeviceMap(const Plan& plan, const Skeleton& skeleton) {
  ML_RETURN_IF_ERROR(CheckWholeModulesOnOneNode(plan));
  absl::flat_hash_map<std::string, int> gpu_of;
  for (const RankPlan& rank : plan.ranks) {
    for (const ReadItem& item : rank.items) gpu_of.emplace(item.tensor, rank.gpu);
  }
  const PlacementUnitIndex index(skeleton);
  std::vector<Placed> placed;
  for (const SkeletonTensor& tensor : skeleton.tensors) {
    auto gpu = gpu_of.find(tensor.name);
    if (gpu == gpu_of.end()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", tensor.name, " is in no rank of the plan"));
    }
    placed.push_back(Placed{tensor.name, index.UnitOf(tensor.name), gpu->second});
  }
  for (const std::vector<std::string>& group : skeleton.tied_groups) {
    auto gpu = group.empty() ? gpu_of.end() : gpu_of.find(group.front());
    if (gpu == gpu_of.end()) continue;  // a group of names the skeleton lacks: nothing to place
    for (size_t i = 1; i < group.size(); ++i) {
      if (!gpu_of.contains(group[i])) placed.push_back(Placed{group[i], index.UnitOf(group[i]), gpu->second});
    }
  }

  // A unit is a key unless it is the root, an ancestor of another unit, or split over GPUs.
  absl::flat_hash_set<std::string> ancestors;
  absl::flat_hash_map<std::string, int> unit_gpu;
  absl::flat_hash_set<std::string> split_units;
  for (const Placed& p : placed) {
    for (size_t dot = p.unit.find('.'); dot != std::string::npos; dot = p.unit.find('.', dot + 1)) {
      ancestors.insert(p.unit.substr(0, dot));
    }
    auto [it, inserted] = unit_gpu.emplace(p.unit, p.gpu);
    if (!inserted && it->second != p.gpu) split_units.insert(p.unit);
  }
  std::vector<HfDeviceMapEntry> entries;
  absl::flat_hash_set<std::string> keyed_units;
  for (const Placed& p : placed) {
    if (p.unit.empty() || ancestors.contains(p.unit) || split_units.contains(p.unit)) {
      entries.push_back(HfDeviceMapEntry{p.name, p.gpu});
    } else if (keyed_units.insert(p.unit).second) {
      entries.push_back(HfDeviceMapEntry{p.unit, p.gpu});
    }
  }
  return entries;
}

std::string HfDeviceMapToJson(const std::vector<HfDeviceMapEntry>& entries) {
  if (entries.empty()) return "{}\n";
  std::string out = "{\n";
  for (size_t i = 0; i < entries.size(); ++i) {
    absl::StrAppend(&out, "  ", json_util::Quote(entries[i].module), ": ", entries[i].gpu,
                    i + 1 == entries.size() ? "\n" : ",\n");
  }
  out.append("}\n");
  return out;
}

}  // namespace metaload
