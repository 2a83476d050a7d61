#include "planner/doctor/quantized_match.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace metaload {
namespace {

bool IsCodeDType(DType d) { return d == DType::kF8E4M3 || d == DType::kF8E5M2 || d == DType::kU8; }

// Whether `stored` holds codes with a scale tensor beside them (the names quantized checkpoints
// use), whatever declares them: a checkpoint quantized without its config.json still is.
bool HoldsCodesWithScales(const std::vector<TensorLayout>& stored) {
  std::set<absl::string_view> names;
  for (const TensorLayout& t : stored) names.insert(t.name);
  for (const TensorLayout& t : stored) {
    if (!IsCodeDType(t.dtype)) continue;
    absl::string_view stem = t.name;
    if (names.count(absl::StrCat(t.name, "_scale_inv")) != 0 ||
        names.count(absl::StrCat(t.name, "_scale")) != 0 ||
        (absl::ConsumeSuffix(&stem, "_blocks") && names.count(absl::StrCat(stem, "_scales")) != 0)) {
      return true;
    }
  }
  return false;
}

// Removes `consumed` names from the unexpected tensors and their groups: a dequantizing load reads
// them as a value's codes or scales.
void Consume(const std::set<std::string>& consumed, MatchReport* report) {
  if (consumed.empty()) return;
  auto gone = [&](const std::string& name) { return consumed.count(name) != 0; };
  report->unexpected.erase(std::remove_if(report->unexpected.begin(), report->unexpected.end(), gone),
                           report->unexpected.end());
  for (ExtraGroup& group : report->extras)
    group.names.erase(std::remove_if(group.names.begin(), group.names.end(), gone), group.names.end());
  report->extras.erase(std::remove_if(report->extras.begin(), report->extras.end(),
                                      [](const ExtraGroup& group) { return group.names.empty(); }),
                       report->extras.end());
}

void Dequantize(const Skeleton& skeleton, const QuantizedSet& set, QuantizationMatch& q,
                MatchReport* report) {
  std::set<std::string> consumed;
  auto consume = [&](const QuantizedValue& v) {
    consumed.insert(v.codes.name);
    consumed.insert(v.scales.name);
  };
  // A stored tensor a dequantizing load refuses is said once, as a problem, not also as a refused
  // conversion or an unexpected tensor.
  for (const auto& [name, why] : set.problems) {
    q.problems.emplace_back(name, why);
    consumed.insert(name);
  }
  std::vector<std::pair<TensorMismatch, std::string>> refused;
  for (auto& entry : report->refused_conversions) {
    const TensorMismatch& m = entry.first;
    const std::string& stored_name = m.stored_as.empty() ? m.name : m.stored_as;
    if (set.problems.count(stored_name) != 0) continue;
    auto value = set.values.find(stored_name);
    if (value != set.values.end() && value->second.codes.name == stored_name &&
        IsConvertibleFloat(m.skeleton_dtype)) {
      q.dequantized.push_back({m.name, m.skeleton_dtype, value->second.Rule()});
      consume(value->second);
      continue;
    }
    refused.push_back(std::move(entry));
  }
  report->refused_conversions = std::move(refused);

  // MXFP4: the module names the value (`x`), the checkpoint only its codes and scales.
  absl::flat_hash_map<absl::string_view, const SkeletonTensor*> by_name;
  for (const SkeletonTensor& t : skeleton.tensors) by_name.emplace(t.name, &t);
  std::vector<std::string> missing;
  bool regroup = false;
  for (std::string& name : report->missing) {
    auto value = set.values.find(name);
    auto tensor = by_name.find(name);
    if (value == set.values.end() || tensor == by_name.end() || value->second.codes.name == name) {
      missing.push_back(std::move(name));
      continue;
    }
    const QuantizedValue& v = value->second;
    const SkeletonTensor& t = *tensor->second;
    if (t.shape == v.shape && !IsConvertibleFloat(t.dtype)) {
      missing.push_back(std::move(name));  // a dequantized value is a float: nothing else holds it
      continue;
    }
    if (t.shape != v.shape) {
      report->shape_mismatches.push_back(
          TensorMismatch{t.name, t.shape, v.shape, t.dtype, v.codes.dtype, ""});
    } else {
      q.dequantized.push_back({t.name, t.dtype, v.Rule()});
    }
    regroup = true;
    consume(v);
  }
  report->missing = std::move(missing);
  if (regroup) GroupMissingTensors(skeleton, report);
  // Skeleton order, whichever way each was found.
  absl::flat_hash_map<absl::string_view, size_t> order;
  for (size_t i = 0; i < skeleton.tensors.size(); ++i) order.emplace(skeleton.tensors[i].name, i);
  std::sort(q.dequantized.begin(), q.dequantized.end(),
            [&](const auto& a, const auto& b) { return order[a.tensor] < order[b.tensor]; });
  Consume(consumed, report);
  report->different_architecture = report->unexplained_extra_count() * 2 > report->checkpoint_tensor_count &&
                                   report->missing.size() * 2 > report->skeleton_tensor_count;
}

}  // namespace

void MatchQuantization(const Skeleton& skeleton, const std::vector<TensorLayout>* stored,
                       const std::optional<Quantization>& declared, const std::string& config_path,
                       bool dequantize, MatchReport* report) {
  if (!declared.has_value() && (stored == nullptr || !HoldsCodesWithScales(*stored))) return;
  QuantizationMatch q;
  q.config_path = config_path;
  q.declared = declared;
  q.dequantize = dequantize;
  if (declared.has_value() && declared->scheme.has_value() && stored != nullptr) {
    const QuantizedSet set = FindQuantized(*declared, *stored);
    q.value_count = set.values.size();
    for (const auto& [name, value] : set.values) {
      q.value_rules.emplace(name, value.Rule());
      q.value_of_codes.emplace(value.codes.name, name);
    }
    for (const SkeletonTensor& t : skeleton.tensors) {
      auto value = q.value_of_codes.find(t.name);
      if (value != q.value_of_codes.end() && t.dtype == set.values.at(value->second).codes.dtype) {
        ++q.kept_as_stored;
      }
    }
    if (dequantize) Dequantize(skeleton, set, q, report);
  }
  report->quantization = std::move(q);
}

}  // namespace metaload
