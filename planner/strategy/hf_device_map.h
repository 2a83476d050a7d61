// A `layers` plan on one node as transformers' `device_map=`: module -> GPU index, for users
// who stay on one host and load with `from_pretrained(dir, device_map=...)`. Pure.
//
//   ML_ASSIGN_OR_RETURN(std::vector<HfDeviceMapEntry> map, HfDeviceMap(plan, skeleton));
//   std::string json = HfDeviceMapToJson(map);  // {"model.embed_tokens": 0, ..., "lm_head": 1}
#ifndef METALOAD_PLANNER_STRATEGY_HF_DEVICE_MAP_H_
#define METALOAD_PLANNER_STRATEGY_HF_DEVICE_MAP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/plan/plan.h"
#include "planner/skeleton/skeleton.h"

namespace metaload {

struct HfDeviceMapEntry {
  std::string module;  // a module path, or a tensor's full name where no module can be a key
  int gpu = 0;         // index on the node (the rank's gpu)
};

// Keys are the plan's placement units, in model order. Each tensor of the skeleton and each
// tied alias (which has no plan item: it lives with the tensor it shares storage with) falls
// under exactly one key: a unit that cannot be a key — the root module "", a module holding
// another unit, or one whose tensors sit on different GPUs — is replaced by its tensors' full
// names. InvalidArgument when the plan's strategy places tensors otherwise than whole modules
// on one GPU each (its record's not_a_device_map: only `layers` does), when it spans more than
// one node, or has no rank for a skeleton tensor.
absl::StatusOr<std::vector<HfDeviceMapEntry>> HfDeviceMap(const Plan& plan, const Skeleton& skeleton);

// A JSON object, one key per line, in the entries' order.
std::string HfDeviceMapToJson(const std::vector<HfDeviceMapEntry>& entries);

}  // namespace metaload

#endif  // METALOAD_PLANNER_STRATEGY_HF_DEVICE_MAP_H_
