// Plan JSON (the contract in plan.h), item checks and the compact form.
#include "planner/plan/plan.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/format/tensor_layout.h"
#include "planner/plan/slice.h"
#include "util/json/json_util.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

using json_util::Json;
using json_util::OrderedJson;

constexpr absl::string_view kSource = "plan";

absl::Status Invalid(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// One item on one line, as json_util::OneLineJson prints the object it would make (", " and
// ": " separators, keys in this order), written directly: building that object for each of
// 100k items was a third of `metactl plan`.
void AppendItem(const ReadItem& item, std::string* out) {
  absl::StrAppend(out, "{\"tensor\": ", json_util::Quote(item.tensor), ", \"dtype\": \"",
                  DTypeCode(item.dtype), "\", \"shape\": [", absl::StrJoin(item.shape, ", "),
                  "], \"bytes\": ", item.size_bytes);
  if (!item.file.empty()) {
    absl::StrAppend(out, ", \"file\": ", json_util::Quote(item.file), ", \"offsets\": [", item.begin_offset,
                    ", ", item.end_offset, "]");
  }
  if (item.slice.has_value()) {
    absl::StrAppend(out, ", \"slice\": {\"dim\": ", item.slice->dim, ", \"start\": ", item.slice->start,
                    ", \"length\": ", item.slice->length, "}");
  }
  if (item.to_dtype.has_value()) absl::StrAppend(out, ", \"to_dtype\": \"", DTypeCode(*item.to_dtype), "\"");
  if (!item.init.empty()) absl::StrAppend(out, ", \"init\": ", json_util::Quote(item.init));
  if (item.missing) absl::StrAppend(out, ", \"missing\": true");
  if (item.dequantize.has_value()) {
    auto range = [](const TensorLayout& r) {
      return absl::StrCat("{\"tensor\": ", json_util::Quote(r.name), ", \"file\": ", json_util::Quote(r.file),
                          ", \"offsets\": [", r.begin_offset, ", ", r.end_offset, "]}");
    };
    absl::StrAppend(out, ", \"dequantize\": {\"rule\": ", json_util::Quote(item.dequantize->rule),
                    ", \"codes\": ", range(item.dequantize->codes),
                    ", \"scales\": ", range(item.dequantize->scales), "}");
  }
  out->push_back('}');
}

void AppendRank(const RankPlan& rank, bool last, std::string* out) {
  absl::StrAppend(out, "    {\n");
  absl::StrAppend(out, "      \"rank\": ", rank.rank, ",\n");
  absl::StrAppend(out, "      \"node\": ", json_util::Quote(rank.node), ",\n");
  absl::StrAppend(out, "      \"gpu\": ", rank.gpu, ",\n");
  absl::StrAppend(out, "      \"bytes\": ", rank.size_bytes, ",\n");
  absl::StrAppend(out, "      \"budget\": ", rank.budget_bytes, ",\n");
  absl::StrAppend(out, "      \"units\": ", json_util::OneLineJson(OrderedJson(rank.units)), ",\n");
  absl::StrAppend(out, "      \"items\": [");
  for (size_t i = 0; i < rank.items.size(); ++i) {
    absl::StrAppend(out, i == 0 ? "\n" : ",\n", "        ");
    AppendItem(rank.items[i], out);
  }
  absl::StrAppend(out, rank.items.empty() ? "]\n" : "\n      ]\n", last ? "    }\n" : "    },\n");
}

absl::StatusOr<int> GetInt(const Json& object, absl::string_view key, absl::string_view where) {
  ML_ASSIGN_OR_RETURN(int64_t value, json_util::GetInt64(object, key, where));
  if (value < 0 || value > std::numeric_limits<int>::max()) {
    return Invalid(where, absl::StrCat("field \"", key, "\": ", value, " is out of range"));
  }
  return static_cast<int>(value);
}

// Strict: the slice must lie inside `shape`, since a reader trusts it to size its reads.
absl::StatusOr<TensorSlice> ParseSlice(const Json& value, const std::vector<int64_t>& shape,
                                       const std::string& where) {
  ML_RETURN_IF_ERROR(json_util::CheckObject(value, where, {"dim", "start", "length"}, {}));
  TensorSlice slice;
  ML_ASSIGN_OR_RETURN(slice.dim, GetInt(value, "dim", where));
  ML_ASSIGN_OR_RETURN(slice.start, json_util::GetInt64(value, "start", where));
  ML_ASSIGN_OR_RETURN(slice.length, json_util::GetInt64(value, "length", where));
  if (slice.dim >= static_cast<int>(shape.size())) {
    return Invalid(where, absl::StrCat("dim ", slice.dim, " but the tensor has ", shape.size(), " dims"));
  }
  const int64_t extent = shape[slice.dim];
  if (slice.start < 0 || slice.length < 0 || slice.start > extent || slice.length > extent - slice.start) {
    return Invalid(where, absl::StrCat("[", slice.start, ", +", slice.length, ") is outside dim ", slice.dim,
                                       " of size ", extent));
  }
  return slice;
}

absl::StatusOr<TensorLayout> ParseStoredRange(const Json& value, const std::string& where) {
  ML_RETURN_IF_ERROR(json_util::CheckObject(value, where, {"tensor", "file", "offsets"}, {}));
  TensorLayout range;
  ML_ASSIGN_OR_RETURN(range.name, json_util::GetString(value, "tensor", where));
  ML_ASSIGN_OR_RETURN(range.file, json_util::GetString(value, "file", where));
  const std::string offsets_where = absl::StrCat(where, ": field \"offsets\"");
  const Json& offsets = value["offsets"];
  if (!offsets.is_array() || offsets.size() != 2) return Invalid(offsets_where, "expected [begin, end]");
  ML_ASSIGN_OR_RETURN(range.begin_offset, json_util::ToUint64(offsets[0], offsets_where));
  ML_ASSIGN_OR_RETURN(range.end_offset, json_util::ToUint64(offsets[1], offsets_where));
  return range;
}

absl::StatusOr<DequantizedFrom> ParseDequantize(const Json& value, const std::string& where) {
  ML_RETURN_IF_ERROR(json_util::CheckObject(value, where, {"rule", "codes", "scales"}, {}));
  DequantizedFrom from;
  ML_ASSIGN_OR_RETURN(from.rule, json_util::GetString(value, "rule", where));
  ML_ASSIGN_OR_RETURN(from.codes, ParseStoredRange(value["codes"], absl::StrCat(where, ".codes")));
  ML_ASSIGN_OR_RETURN(from.scales, ParseStoredRange(value["scales"], absl::StrCat(where, ".scales")));
  return from;
}

absl::StatusOr<ReadItem> ParseItem(const Json& value, absl::string_view where) {
  ML_RETURN_IF_ERROR(
      json_util::CheckObject(value, where, {"tensor", "dtype", "shape", "bytes"},
                             {"file", "offsets", "slice", "to_dtype", "init", "missing", "dequantize"}));
  ReadItem item;
  ML_ASSIGN_OR_RETURN(item.tensor, json_util::GetString(value, "tensor", where));
  ML_ASSIGN_OR_RETURN(std::string dtype_code, json_util::GetString(value, "dtype", where));
  absl::StatusOr<DType> dtype = DTypeFromCode(dtype_code);
  if (!dtype.ok()) return Invalid(absl::StrCat(where, ": field \"dtype\""), dtype.status().message());
  item.dtype = *dtype;
  ML_ASSIGN_OR_RETURN(item.shape,
                      json_util::ToShape(value["shape"], absl::StrCat(where, ": field \"shape\"")));
  ML_ASSIGN_OR_RETURN(item.size_bytes, json_util::GetUint64(value, "bytes", where));
  if (value.contains("file") != value.contains("offsets")) {
    return Invalid(where,
                   "\"file\" and \"offsets\" come together (both, or neither when there is no checkpoint)");
  }
  if (value.contains("slice")) {
    ML_ASSIGN_OR_RETURN(item.slice,
                        ParseSlice(value["slice"], item.shape, absl::StrCat(where, ": field \"slice\"")));
  }
  if (value.contains("to_dtype")) {
    ML_ASSIGN_OR_RETURN(std::string code, json_util::GetString(value, "to_dtype", where));
    absl::StatusOr<DType> to_dtype = DTypeFromCode(code);
    if (!to_dtype.ok())
      return Invalid(absl::StrCat(where, ": field \"to_dtype\""), to_dtype.status().message());
    item.to_dtype = *to_dtype;
  }
  if (value.contains("init")) {
    ML_ASSIGN_OR_RETURN(item.init, json_util::GetString(value, "init", where));
  }
  if (value.contains("missing")) {
    if (!value["missing"].is_boolean()) return Invalid(where, "field \"missing\" must be true or false");
    item.missing = value["missing"].get<bool>();
  }
  if (value.contains("file")) {
    ML_ASSIGN_OR_RETURN(item.file, json_util::GetString(value, "file", where));
    if (item.file.empty()) return Invalid(where, "field \"file\" is empty");
    const std::string offsets_where = absl::StrCat(where, ": field \"offsets\"");
    const Json& offsets = value["offsets"];
    if (!offsets.is_array() || offsets.size() != 2) return Invalid(offsets_where, "expected [begin, end]");
    ML_ASSIGN_OR_RETURN(item.begin_offset, json_util::ToUint64(offsets[0], offsets_where));
    ML_ASSIGN_OR_RETURN(item.end_offset, json_util::ToUint64(offsets[1], offsets_where));
    if (item.begin_offset > item.end_offset) {
      return Invalid(offsets_where,
                     absl::StrCat("begin ", item.begin_offset, " is after end ", item.end_offset));
    }
  }
  if (value.contains("dequantize")) {
    ML_ASSIGN_OR_RETURN(item.dequantize,
                        ParseDequantize(value["dequantize"], absl::StrCat(where, ": field \"dequantize\"")));
  }
  ML_RETURN_IF_ERROR(ValidateReadItem(item, where));
  return item;
}

absl::StatusOr<RankPlan> ParseRank(const Json& value, size_t index) {
  const std::string where = absl::StrCat(kSource, ": ranks[", index, "]");
  ML_RETURN_IF_ERROR(
      json_util::CheckObject(value, where, {"rank", "node", "gpu", "bytes", "budget", "units", "items"}, {}));
  RankPlan rank;
  ML_ASSIGN_OR_RETURN(rank.rank, GetInt(value, "rank", where));
  if (rank.rank != static_cast<int>(index)) {
    return Invalid(where,
                   absl::StrCat("field \"rank\" is ", rank.rank, " (ranks are listed in order from 0)"));
  }
  ML_ASSIGN_OR_RETURN(rank.node, json_util::GetString(value, "node", where));
  ML_ASSIGN_OR_RETURN(rank.gpu, GetInt(value, "gpu", where));
  ML_ASSIGN_OR_RETURN(rank.size_bytes, json_util::GetUint64(value, "bytes", where));
  ML_ASSIGN_OR_RETURN(rank.budget_bytes, json_util::GetUint64(value, "budget", where));
  ML_ASSIGN_OR_RETURN(const Json* units, json_util::GetArray(value, "units", where));
  for (size_t i = 0; i < units->size(); ++i) {
    ML_ASSIGN_OR_RETURN(std::string unit,
                        json_util::ToString((*units)[i], absl::StrCat(where, ": units[", i, "]")));
    rank.units.push_back(std::move(unit));
  }
  ML_ASSIGN_OR_RETURN(const Json* items, json_util::GetArray(value, "items", where));
  for (size_t i = 0; i < items->size(); ++i) {
    ML_ASSIGN_OR_RETURN(ReadItem item, ParseItem((*items)[i], absl::StrCat(where, ".items[", i, "]")));
    rank.items.push_back(std::move(item));
  }
  return rank;
}

}  // namespace

absl::Status ValidateReadItem(const ReadItem& item, absl::string_view where) {
  const std::string at = absl::StrCat(where, " (", item.tensor, ")");
  uint64_t elements = 1;
  for (int64_t d : item.shape) {
    if (d < 0 || MulOverflows(elements, static_cast<uint64_t>(d), &elements)) {
      return Invalid(at, absl::StrCat("bad shape ", ShapeToString(item.shape)));
    }
  }
  uint64_t stored_bytes = 0, held_whole_bytes = 0;
  if (MulOverflows(elements, static_cast<uint64_t>(DTypeSizeBytes(item.dtype)), &stored_bytes) ||
      MulOverflows(elements, static_cast<uint64_t>(DTypeSizeBytes(LoadDType(item))), &held_whole_bytes)) {
    return Invalid(at, absl::StrCat("shape ", ShapeToString(item.shape), " is larger than 2^64 bytes"));
  }
  if (item.slice.has_value()) {
    const TensorSlice& slice = *item.slice;
    if (slice.dim < 0 || slice.dim >= static_cast<int>(item.shape.size()) || slice.start < 0 ||
        slice.length < 0 || slice.start > item.shape[slice.dim] ||
        slice.length > item.shape[slice.dim] - slice.start) {
      return Invalid(at, absl::StrCat("slice dim ", slice.dim, " [", slice.start, ", +", slice.length,
                                      ") is outside ", ShapeToString(item.shape)));
    }
  }
  if (item.to_dtype.has_value() && (*item.to_dtype == item.dtype || !IsConvertibleFloat(item.dtype) ||
                                    !IsConvertibleFloat(*item.to_dtype))) {
    return Invalid(at,
                   absl::StrCat("cannot convert ", DTypeCode(item.dtype), " to ", DTypeCode(*item.to_dtype),
                                " (to_dtype is a different one of F16, BF16, F32, F64)"));
  }
  // With the shape checked, the slice's bytes cannot overflow: they are at most the whole's.
  uint64_t slice_elements = 1;
  for (size_t d = 0; d < item.shape.size(); ++d) {
    slice_elements *= static_cast<uint64_t>(item.slice.has_value() && static_cast<int>(d) == item.slice->dim
                                                ? item.slice->length
                                                : item.shape[d]);
  }
  const uint64_t held_bytes = slice_elements * static_cast<uint64_t>(DTypeSizeBytes(LoadDType(item)));
  if (item.size_bytes != held_bytes) {
    return Invalid(at, absl::StrCat("\"bytes\" is ", item.size_bytes, " but its ",
                                    item.slice.has_value() ? "slice" : "shape", " holds ", held_bytes,
                                    " bytes of ", DTypeCode(LoadDType(item))));
  }
  if (item.dequantize.has_value()) {
    // A dequantized value has no stored bytes of its own: its codes and scales are its source.
    if (!item.file.empty() || item.to_dtype.has_value() || !IsConvertibleFloat(item.dtype)) {
      return Invalid(
          at, "a dequantized item is held in a floating-point dtype, with no file or to_dtype of its own");
    }
    for (const TensorLayout* range : {&item.dequantize->codes, &item.dequantize->scales}) {
      if (range->name.empty() || range->file.empty() || range->end_offset < range->begin_offset) {
        return Invalid(at,
                       absl::StrCat("dequantize: codes and scales need a tensor, a file and offsets [begin, "
                                    "end] (",
                                    range->name, ")"));
      }
    }
  }
  if (!item.file.empty() &&
      (item.end_offset < item.begin_offset || item.end_offset - item.begin_offset != stored_bytes)) {
    return Invalid(
        at, absl::StrCat("offsets [", item.begin_offset, ", ", item.end_offset, ") do not hold the ",
                         stored_bytes, " bytes of ", DTypeCode(item.dtype), " ", ShapeToString(item.shape)));
  }
  if (item.stored_digest.has_value()) {
    if (absl::Status bad = CheckTensorDigest(*item.stored_digest, item.shape, item.dtype); !bad.ok()) {
      return Invalid(at, std::string(bad.message()));
    }
    if (item.stored_index < 0) return Invalid(at, "a digest without the tensor's index in the model");
  }
  return absl::OkStatus();
}

std::string PlanToJson(const Plan& plan) {
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"model\": ", json_util::Quote(plan.model), ",\n");
  absl::StrAppend(&out, "  \"strategy\": ", json_util::Quote(plan.strategy), ",\n");
  absl::StrAppend(&out, "  \"world_size\": ", plan.world_size, ",\n");
  if (plan.group_size != 1) absl::StrAppend(&out, "  \"group_size\": ", plan.group_size, ",\n");
  if (plan.replicas != 1) absl::StrAppend(&out, "  \"replicas\": ", plan.replicas, ",\n");
  absl::StrAppend(&out, "  \"ranks\": [", plan.ranks.empty() ? "]\n" : "\n");
  for (size_t i = 0; i < plan.ranks.size(); ++i) AppendRank(plan.ranks[i], i + 1 == plan.ranks.size(), &out);
  if (!plan.ranks.empty()) out.append("  ]\n");
  out.append("}\n");
  return out;
}

absl::StatusOr<Plan> PlanFromJson(const std::string& text) {
  ML_ASSIGN_OR_RETURN(Json root, json_util::Parse(text, kSource));
  ML_RETURN_IF_ERROR(json_util::CheckObject(root, kSource, {"model", "strategy", "world_size", "ranks"},
                                            {"group_size", "replicas"}));
  Plan plan;
  ML_ASSIGN_OR_RETURN(plan.model, json_util::GetString(root, "model", kSource));
  ML_ASSIGN_OR_RETURN(plan.strategy, json_util::GetString(root, "strategy", kSource));
  ML_ASSIGN_OR_RETURN(plan.world_size, GetInt(root, "world_size", kSource));
  if (root.contains("group_size")) {
    ML_ASSIGN_OR_RETURN(plan.group_size, GetInt(root, "group_size", kSource));
  }
  if (root.contains("replicas")) {
    ML_ASSIGN_OR_RETURN(plan.replicas, GetInt(root, "replicas", kSource));
  }
  if (plan.group_size < 1 || plan.replicas < 1) {
    return Invalid(kSource, "\"group_size\" and \"replicas\" must be at least 1");
  }
  // Each at most 2^31 - 1: their product, taken in 64 bits, cannot overflow.
  if (int64_t{plan.group_size} * plan.replicas > std::max(plan.world_size, 1)) {
    return Invalid(kSource, absl::StrCat("\"group_size\" ", plan.group_size, " x \"replicas\" ",
                                         plan.replicas, " is more than the world size ", plan.world_size));
  }
  ML_ASSIGN_OR_RETURN(const Json* ranks, json_util::GetArray(root, "ranks", kSource));
  if (ranks->size() != static_cast<size_t>(plan.world_size)) {
    return Invalid(kSource, absl::StrCat("\"world_size\" is ", plan.world_size, " but \"ranks\" lists ",
                                         ranks->size(), " ranks"));
  }
  for (size_t i = 0; i < ranks->size(); ++i) {
    ML_ASSIGN_OR_RETURN(RankPlan rank, ParseRank((*ranks)[i], i));
    plan.ranks.push_back(std::move(rank));
  }
  return plan;
}

void CompactPlan::Add(CompactRank& rank, size_t index, std::optional<TensorSlice> slice) const {
  const ReadItem& whole = items[index];
  ItemRef ref;
  ref.item = static_cast<uint32_t>(index);
  if (slice.has_value()) {
    ref.slice_dim = slice->dim;
    ref.slice_start = slice->start;
    ref.slice_length = slice->length;
    ref.size_bytes = SliceSizeBytes(whole.shape, LoadDType(whole), slice);
  } else {
    ref.size_bytes = whole.size_bytes;
  }
  rank.size_bytes += ref.size_bytes;
  rank.refs.push_back(ref);
}

ReadItem CompactPlan::ExpandItem(const ItemRef& ref) const {
  ReadItem item = items[ref.item];
  if (ref.slice_dim >= 0) {
    item.slice = TensorSlice{ref.slice_dim, ref.slice_start, ref.slice_length};
    item.size_bytes = ref.size_bytes;
  }
  return item;
}

RankPlan CompactPlan::ExpandRank(int r) const {
  const CompactRank& compact = ranks[static_cast<size_t>(r)];
  RankPlan rank;
  rank.rank = compact.rank;
  rank.node = compact.node;
  rank.gpu = compact.gpu;
  rank.size_bytes = compact.size_bytes;
  rank.budget_bytes = compact.budget_bytes;
  rank.units = compact.units;
  rank.items.reserve(compact.refs.size());
  for (const ItemRef& ref : compact.refs) rank.items.push_back(ExpandItem(ref));
  return rank;
}

Plan CompactPlan::Expand() const {
  Plan plan;
  plan.model = model;
  plan.strategy = strategy;
  plan.world_size = world_size;
  plan.group_size = group_size;
  plan.replicas = replicas;
  plan.ranks.reserve(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) plan.ranks.push_back(ExpandRank(static_cast<int>(r)));
  return plan;
}

}  // namespace metaload
