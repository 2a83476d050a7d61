// The skeleton JSON format (docs/skeleton-format.md): strict parsing, stable writing, and
// the placement units strategies work with. Deriving a skeleton from a checkpoint lives in
// skeleton_derive.cc.
#include "planner/skeleton/skeleton.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "planner/format/tensor_layout.h"
#include "planner/skeleton/init_rule.h"
#include "util/json/json_util.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

using json_util::Json;
using json_util::OrderedJson;

constexpr absl::string_view kParameter = "parameter";
constexpr absl::string_view kBuffer = "buffer";

absl::Status Invalid(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// Element count times dtype size, refusing shapes of 2^63 bytes or more: sizes are summed and
// compared later, where a wrapped size would make a huge tensor look small, and the element
// count (at most the byte count) must fit NumElements' int64 (a U8 [2^62, 3] overflowed it:
// undefined behaviour that UBSan found in `scripts/setup.sh sanitize`).
absl::Status CheckSizeFits(const SkeletonTensor& tensor, absl::string_view where) {
  uint64_t size_bytes = 0;
  if (!TensorBytesFit(tensor.shape, tensor.dtype, &size_bytes)) {
    return Invalid(where, absl::StrCat("shape ", ShapeToString(tensor.shape), " of ", DTypeCode(tensor.dtype),
                                       " is 2^63 bytes or more"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SkeletonTensor> ParseTensor(const Json& value, absl::string_view array_where) {
  SkeletonTensor tensor;
  ML_RETURN_IF_ERROR(
      json_util::CheckObject(value, array_where, {"name", "shape", "dtype"}, {"kind", "persistent", "init"}));
  ML_ASSIGN_OR_RETURN(tensor.name, json_util::GetString(value, "name", array_where));
  if (tensor.name.empty()) return Invalid(array_where, "field \"name\" is empty");
  const std::string where = absl::StrCat(array_where, " (\"", tensor.name, "\")");

  ML_ASSIGN_OR_RETURN(tensor.shape,
                      json_util::ToShape(value["shape"], absl::StrCat(where, ": field \"shape\"")));
  ML_ASSIGN_OR_RETURN(std::string dtype_code, json_util::GetString(value, "dtype", where));
  absl::StatusOr<DType> dtype = DTypeFromCode(dtype_code);
  if (!dtype.ok()) return Invalid(absl::StrCat(where, ": field \"dtype\""), dtype.status().message());
  tensor.dtype = *dtype;

  std::string kind(kParameter);
  ML_RETURN_IF_ERROR(json_util::OptionalString(value, "kind", where, &kind));
  if (kind != kParameter && kind != kBuffer) {
    return Invalid(absl::StrCat(where, ": field \"kind\""),
                   absl::StrCat("expected \"parameter\" or \"buffer\", found \"", kind, "\""));
  }
  tensor.is_buffer = kind == kBuffer;
  ML_RETURN_IF_ERROR(json_util::OptionalBool(value, "persistent", where, &tensor.persistent));
  if (!tensor.persistent && !tensor.is_buffer) {
    return Invalid(where,
                   "only a buffer can be non-persistent (\"persistent\": false needs \"kind\": \"buffer\")");
  }
  ML_RETURN_IF_ERROR(json_util::OptionalString(value, "init", where, &tensor.init));
  if (value.contains("init") && tensor.persistent) {
    return Invalid(where,
                   "field \"init\" is only for non-persistent buffers (a checkpoint fills this tensor)");
  }
  // Checked here, at the edge: a rule that does not parse was registered and planned, then left
  // the buffer unfilled on every rank at load (exit 3), blaming the load for the skeleton.
  if (!tensor.init.empty()) {
    if (absl::StatusOr<InitRule> rule = ParseInitRule(tensor.init); !rule.ok()) {
      return Invalid(absl::StrCat(where, ": field \"init\""), rule.status().message());
    }
  }
  ML_RETURN_IF_ERROR(CheckSizeFits(tensor, where));
  return tensor;
}

absl::Status ParseTensors(const Json& array, absl::string_view source, Skeleton* skeleton) {
  absl::flat_hash_map<std::string, size_t> index_by_name;
  uint64_t total_bytes = 0;
  for (size_t i = 0; i < array.size(); ++i) {
    const std::string where = absl::StrCat(source, ": tensors[", i, "]");
    ML_ASSIGN_OR_RETURN(SkeletonTensor tensor, ParseTensor(array[i], where));
    const std::string named_where = absl::StrCat(where, " (\"", tensor.name, "\")");
    auto [it, inserted] = index_by_name.emplace(tensor.name, i);
    if (!inserted) {
      return Invalid(named_where,
                     absl::StrCat("tensor \"", tensor.name, "\" is already tensors[", it->second, "]"));
    }
    if (AddOverflows(total_bytes, tensor.size_bytes(), &total_bytes)) {
      return Invalid(named_where,
                     absl::StrCat("tensor \"", tensor.name, "\" takes the model past 2^64 bytes"));
    }
    skeleton->tensors.push_back(std::move(tensor));
  }
  return absl::OkStatus();
}

absl::Status ParseModules(const Json& array, absl::string_view source, Skeleton* skeleton) {
  absl::flat_hash_map<std::string, size_t> index_by_path;
  for (size_t i = 0; i < array.size(); ++i) {
    const std::string where = absl::StrCat(source, ": modules[", i, "]");
    SkeletonModule module;
    ML_RETURN_IF_ERROR(json_util::CheckObject(array[i], where, {"path"}, {"type", "no_split"}));
    ML_ASSIGN_OR_RETURN(module.path, json_util::GetString(array[i], "path", where));
    ML_RETURN_IF_ERROR(json_util::OptionalString(array[i], "type", where, &module.type));
    ML_RETURN_IF_ERROR(json_util::OptionalBool(array[i], "no_split", where, &module.no_split));
    auto [it, inserted] = index_by_path.emplace(module.path, i);
    if (!inserted) {
      return Invalid(where,
                     absl::StrCat("module \"", module.path, "\" is already modules[", it->second, "]"));
    }
    skeleton->modules.push_back(std::move(module));
  }
  return absl::OkStatus();
}

absl::Status ParseTied(const Json& array, absl::string_view source, Skeleton* skeleton) {
  absl::flat_hash_set<std::string> names;
  for (const SkeletonTensor& tensor : skeleton->tensors) names.insert(tensor.name);
  absl::flat_hash_map<std::string, size_t> group_of_name;
  for (size_t g = 0; g < array.size(); ++g) {
    const std::string where = absl::StrCat(source, ": tied[", g, "]");
    if (!array[g].is_array() || array[g].size() < 2) {
      return Invalid(where, "a tied group is an array of at least two tensor names (the stored one first)");
    }
    std::vector<std::string> group;
    for (size_t i = 0; i < array[g].size(); ++i) {
      ML_ASSIGN_OR_RETURN(std::string name,
                          json_util::ToString(array[g][i], absl::StrCat(where, "[", i, "]")));
      bool is_tensor = names.contains(name);
      if (i == 0 && !is_tensor) {
        return Invalid(
            where, absl::StrCat("\"", name, "\" is not in \"tensors\" (the first name of a tied group is ",
                                "the stored tensor)"));
      }
      if (i > 0 && is_tensor) {
        return Invalid(where,
                       absl::StrCat("alias \"", name, "\" is also in \"tensors\" (an alias shares the ",
                                    "storage of \"", group[0], "\" and must not be listed as a tensor)"));
      }
      auto [it, inserted] = group_of_name.emplace(name, g);
      if (!inserted) {
        return Invalid(where, absl::StrCat("\"", name, "\" is already in tied[", it->second, "]"));
      }
      group.push_back(std::move(name));
    }
    skeleton->tied_groups.push_back(std::move(group));
  }
  return absl::OkStatus();
}

// [{"pattern": "*.q_proj.weight", "split": "column" | "row" | "replicate" | {"dim": N}}]
absl::Status ParseTpRules(const Json& rules, const std::string& source, Skeleton* skeleton) {
  for (size_t i = 0; i < rules.size(); ++i) {
    const std::string where = absl::StrCat(source, ": tp_rules[", i, "]");
    ML_RETURN_IF_ERROR(json_util::CheckObject(rules[i], where, {"pattern", "split"}, {}));
    TpRule rule;
    ML_ASSIGN_OR_RETURN(rule.pattern, json_util::GetString(rules[i], "pattern", where));
    if (rule.pattern.empty()) return Invalid(where, "field \"pattern\" is empty");
    const Json& split = rules[i]["split"];
    if (split.is_string()) {
      rule.split = split.get<std::string>();
      if (rule.split != "column" && rule.split != "row" && rule.split != "replicate") {
        return Invalid(where, absl::StrCat("field \"split\": \"", rule.split,
                                           "\" is not \"column\", \"row\", \"replicate\" or {\"dim\": N}"));
      }
    } else if (split.is_object()) {
      const std::string split_where = absl::StrCat(where, ": field \"split\"");
      ML_RETURN_IF_ERROR(json_util::CheckObject(split, split_where, {"dim"}, {}));
      ML_ASSIGN_OR_RETURN(int64_t dim, json_util::GetInt64(split, "dim", split_where));
      if (dim < 0 || dim > 64) return Invalid(split_where, absl::StrCat("dim ", dim, " is out of range"));
      rule.split = "dim";
      rule.dim = static_cast<int>(dim);
    } else {
      return Invalid(where, "field \"split\" must be \"column\", \"row\", \"replicate\" or {\"dim\": N}");
    }
    skeleton->tp_rules.push_back(std::move(rule));
  }
  return absl::OkStatus();
}

// {"heads": H, "kv_heads": K, "head_dim": D}
absl::StatusOr<AttentionGeometry> ParseAttention(const Json& value, const std::string& source) {
  const std::string where = absl::StrCat(source, ": field \"attention\"");
  ML_RETURN_IF_ERROR(json_util::CheckObject(value, where, {"heads", "kv_heads", "head_dim"}, {}));
  AttentionGeometry attention;
  for (auto [key, field] : {std::pair<const char*, int64_t*>{"heads", &attention.heads},
                            {"kv_heads", &attention.kv_heads},
                            {"head_dim", &attention.head_dim}}) {
    ML_ASSIGN_OR_RETURN(*field, json_util::GetInt64(value, key, where));
    if (*field < 1 || *field > kMaxAttentionField) {
      return Invalid(absl::StrCat(where, ": field \"", key, "\""),
                     absl::StrCat(*field, " is not in [1, ", kMaxAttentionField, "]"));
    }
  }
  if (attention.heads % attention.kv_heads != 0) {
    return Invalid(where, absl::StrCat("\"heads\" (", attention.heads,
                                       ") is not a multiple of \"kv_heads\" (", attention.kv_heads,
                                       "): each key/value head serves a whole number of query heads"));
  }
  return attention;
}

OrderedJson TpRuleToJson(const TpRule& rule) {
  OrderedJson object;
  object["pattern"] = rule.pattern;
  if (rule.split == "dim") {
    OrderedJson split;
    split["dim"] = rule.dim;
    object["split"] = std::move(split);
  } else {
    object["split"] = rule.split;
  }
  return object;
}

OrderedJson TensorToJson(const SkeletonTensor& tensor) {
  OrderedJson object;
  object["name"] = tensor.name;
  object["shape"] = tensor.shape;
  object["dtype"] = std::string(DTypeCode(tensor.dtype));
  object["kind"] = std::string(tensor.is_buffer ? kBuffer : kParameter);
  if (!tensor.persistent) object["persistent"] = false;
  if (!tensor.init.empty()) object["init"] = tensor.init;
  return object;
}

OrderedJson ModuleToJson(const SkeletonModule& module) {
  OrderedJson object;
  object["path"] = module.path;
  object["type"] = module.type;
  object["no_split"] = module.no_split;
  return object;
}

// One entry per line: a model has thousands of tensors, and a line each keeps the file
// readable and diffable.
template <typename T, typename ToJson>
void AppendList(absl::string_view key, const std::vector<T>& entries, ToJson to_json, bool last,
                std::string* out) {
  absl::StrAppend(out, "  ", json_util::Quote(key), ": [");
  for (size_t i = 0; i < entries.size(); ++i) {
    absl::StrAppend(out, i == 0 ? "\n" : ",\n", "    ", json_util::OneLineJson(to_json(entries[i])));
  }
  absl::StrAppend(out, entries.empty() ? "]" : "\n  ]", last ? "\n" : ",\n");
}

}  // namespace

uint64_t SkeletonTensor::size_bytes() const {
  return static_cast<uint64_t>(NumElements(shape)) * static_cast<uint64_t>(DTypeSizeBytes(dtype));
}

uint64_t Skeleton::total_size_bytes() const {
  uint64_t total = 0;
  for (const SkeletonTensor& tensor : tensors) total += tensor.size_bytes();
  return total;
}

const SkeletonTensor* Skeleton::Find(absl::string_view name) const {
  for (const SkeletonTensor& tensor : tensors) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

absl::StatusOr<Skeleton> ParseSkeletonJson(absl::string_view text, absl::string_view source_name) {
  const std::string source(source_name.empty() ? "skeleton" : source_name);
  ML_ASSIGN_OR_RETURN(Json root, json_util::Parse(text, source));
  ML_RETURN_IF_ERROR(
      json_util::CheckObject(root, source, {"format", "tensors"},
                             {"model", "architecture", "attention", "modules", "tied", "tp_rules"}));
  ML_ASSIGN_OR_RETURN(std::string format, json_util::GetString(root, "format", source));
  if (format != kSkeletonFormat) {
    return Invalid(absl::StrCat(source, ": field \"format\""),
                   absl::StrCat("expected \"", kSkeletonFormat, "\", found \"", format, "\""));
  }
  Skeleton skeleton;
  ML_RETURN_IF_ERROR(json_util::OptionalString(root, "model", source, &skeleton.model));
  ML_RETURN_IF_ERROR(json_util::OptionalString(root, "architecture", source, &skeleton.architecture));
  if (root.contains("attention")) {
    ML_ASSIGN_OR_RETURN(skeleton.attention, ParseAttention(root["attention"], source));
  }
  ML_ASSIGN_OR_RETURN(const Json* tensors, json_util::GetArray(root, "tensors", source));
  ML_RETURN_IF_ERROR(ParseTensors(*tensors, source, &skeleton));
  if (root.contains("modules")) {
    ML_ASSIGN_OR_RETURN(const Json* modules, json_util::GetArray(root, "modules", source));
    ML_RETURN_IF_ERROR(ParseModules(*modules, source, &skeleton));
  }
  if (root.contains("tied")) {
    ML_ASSIGN_OR_RETURN(const Json* tied, json_util::GetArray(root, "tied", source));
    ML_RETURN_IF_ERROR(ParseTied(*tied, source, &skeleton));
  }
  if (root.contains("tp_rules")) {
    ML_ASSIGN_OR_RETURN(const Json* rules, json_util::GetArray(root, "tp_rules", source));
    ML_RETURN_IF_ERROR(ParseTpRules(*rules, source, &skeleton));
  }
  return skeleton;
}

std::string SkeletonToJson(const Skeleton& skeleton) {
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"format\": ", json_util::Quote(kSkeletonFormat), ",\n");
  absl::StrAppend(&out, "  \"model\": ", json_util::Quote(skeleton.model), ",\n");
  absl::StrAppend(&out, "  \"architecture\": ", json_util::Quote(skeleton.architecture), ",\n");
  // Written only when known, so skeletons derived from a checkpoint keep their bytes.
  if (skeleton.attention.has_value()) {
    OrderedJson attention;
    attention["heads"] = skeleton.attention->heads;
    attention["kv_heads"] = skeleton.attention->kv_heads;
    attention["head_dim"] = skeleton.attention->head_dim;
    absl::StrAppend(&out, "  \"attention\": ", json_util::OneLineJson(attention), ",\n");
  }
  AppendList("tensors", skeleton.tensors, TensorToJson, /*last=*/false, &out);
  AppendList("modules", skeleton.modules, ModuleToJson, /*last=*/false, &out);
  AppendList(
      "tied", skeleton.tied_groups, [](const std::vector<std::string>& group) { return OrderedJson(group); },
      /*last=*/skeleton.tp_rules.empty(), &out);
  // Written only when present, so skeletons without rules keep their bytes.
  if (!skeleton.tp_rules.empty())
    AppendList("tp_rules", skeleton.tp_rules, TpRuleToJson, /*last=*/true, &out);
  out.append("}\n");
  return out;
}

PlacementUnitIndex::PlacementUnitIndex(const Skeleton& skeleton) {
  for (const SkeletonModule& module : skeleton.modules) {
    if (module.no_split) no_split_paths_.insert(module.path);
  }
}

std::string PlacementUnitIndex::UnitOf(absl::string_view tensor_name) const {
  // Ancestors from the outermost in: the root "", then each dotted prefix. The last prefix
  // is the parent module, the unit when no ancestor is no-split.
  if (no_split_paths_.contains("")) return "";
  size_t dot = tensor_name.find('.');
  absl::string_view parent;
  while (dot != absl::string_view::npos) {
    parent = tensor_name.substr(0, dot);
    if (no_split_paths_.contains(parent)) return std::string(parent);
    dot = tensor_name.find('.', dot + 1);
  }
  return std::string(parent);
}

std::string PlacementUnitOf(const Skeleton& skeleton, absl::string_view tensor_name) {
  return PlacementUnitIndex(skeleton).UnitOf(tensor_name);
}

}  // namespace metaload
