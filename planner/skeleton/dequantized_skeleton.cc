#include "planner/skeleton/dequantized_skeleton.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace metaload {

Skeleton DequantizedSkeleton(const Skeleton& derived, const QuantizedSet& set, DType held) {
  Skeleton out = derived;
  out.tensors.clear();
  std::set<std::string> dropped;
  for (const SkeletonTensor& t : derived.tensors) {
    auto source = set.source_of.find(t.name);
    if (source == set.source_of.end()) {
      out.tensors.push_back(t);
      continue;
    }
    const QuantizedValue& value = set.values.at(source->second);
    if (t.name != value.codes.name) {  // a scale: consumed by its value
      dropped.insert(t.name);
      continue;
    }
    SkeletonTensor v = t;
    v.name = value.name;
    v.shape = value.shape;
    v.dtype = held;
    if (v.name != t.name) dropped.insert(t.name);
    out.tensors.push_back(std::move(v));
  }
  for (std::vector<std::string>& group : out.tied_groups) {
    group.erase(std::remove_if(group.begin(), group.end(),
                               [&](const std::string& name) { return dropped.count(name) != 0; }),
                group.end());
  }
  out.tied_groups.erase(
      std::remove_if(out.tied_groups.begin(), out.tied_groups.end(),
                     [](const std::vector<std::string>& group) { return group.size() < 2; }),
      out.tied_groups.end());
  return out;
}

}  // namespace metaload
