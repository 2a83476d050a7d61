#include "planner/doctor/quantization_report.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "planner/doctor/report_text.h"

namespace metaload {
namespace {

using report_text::kEmDash;
using report_text::Plural;

using json_util::OrderedJson;

constexpr char kDequantizeFix[] =
    "dequantize on load (metactl load --dequantize, dequantize=True; `metactl check --dequantize` judges "
    "that load), or build the module with the checkpoint's quantization_config to keep the codes as stored";

std::string DeclaredBy(const QuantizationMatch& q) {
  return q.config_path.empty() ? "" : absl::StrCat(" (declared by ", q.config_path, ")");
}

// "BF16" or "BF16/F32": the dtypes values are dequantized to.
std::string HeldDtypes(const QuantizationMatch& q) {
  std::vector<DType> seen;
  std::string out;
  for (const auto& d : q.dequantized) {
    if (std::find(seen.begin(), seen.end(), d.held) != seen.end()) continue;
    absl::StrAppend(&out, seen.empty() ? "" : "/", DTypeCode(d.held));
    seen.push_back(d.held);
  }
  return out;
}

}  // namespace

std::vector<OrderedJson> QuantizationEntries(const MatchReport& report) {
  if (!report.quantization.has_value()) return {};
  const QuantizationMatch& q = *report.quantization;
  OrderedJson entry;
  entry["config"] = q.config_path;
  entry["dequantize"] = q.dequantize;
  if (!q.declared.has_value()) {
    entry["method"] = nullptr;
    entry["message"] =
        absl::StrCat("the checkpoint stores FP8 or U8 codes with scale tensors beside them, but ",
                     q.config_path.empty() ? "no config.json beside it" : q.config_path,
                     " declares no quantization_config: metaload cannot tell how to dequantize them");
    entry["fix"] =
        "load them into a module of their stored dtypes, or use a checkpoint whose config.json has its "
        "quantization_config";
    return {entry};
  }
  const Quantization& declared = *q.declared;
  entry["method"] = declared.method;
  entry["scheme"] =
      declared.scheme.has_value() ? OrderedJson(QuantSchemeName(*declared.scheme)) : OrderedJson();
  entry["description"] = declared.Description();
  entry["capability"] = declared.Capability();
  if (q.Refused()) {
    entry["message"] = absl::StrCat("the checkpoint is quantized with ", declared.method, DeclaredBy(q),
                                    ", which metaload does not read: ", declared.unsupported);
    entry["fix"] = "use an unquantized (BF16) export of the model; --dequantize does not change this";
    return {entry};
  }
  entry["values"] = q.value_count;
  entry["dequantized"] = q.dequantized.size();
  entry["kept_as_stored"] = q.kept_as_stored;
  std::string message = absl::StrCat("the checkpoint is quantized: ", declared.Description(), DeclaredBy(q));
  if (report.shapes_checked) {
    absl::StrAppend(&message, "; ", Plural(q.value_count, "value", "values"), " stored as codes and scales");
  }
  if (q.kept_as_stored > 0) {
    absl::StrAppend(&message, "; the skeleton holds ", q.kept_as_stored, " of them",
                    " as stored codes (a module built quantized: loaded as stored)");
  }
  if (q.dequantize) {
    absl::StrAppend(&message, "; judged as a dequantizing load (--dequantize): ",
                    Plural(q.dequantized.size(), "tensor", "tensors"), " dequantized",
                    q.dequantized.empty() ? "" : absl::StrCat(" to ", HeldDtypes(q), " on load (below)"));
  }
  entry["message"] = std::move(message);
  entry["can"] = declared.Capability();
  return {entry};
}

std::vector<OrderedJson> DequantizedEntries(const MatchReport& report) {
  std::vector<OrderedJson> entries;
  if (!report.quantization.has_value()) return entries;
  for (const auto& d : report.quantization->dequantized) {
    OrderedJson entry;
    entry["tensor"] = d.tensor;
    entry["held_dtype"] = std::string(DTypeCode(d.held));
    entry["rule"] = d.rule;
    entry["message"] = absl::StrCat(d.tensor, " ", DTypeCode(d.held), " <- ", d.rule);
    entries.push_back(std::move(entry));
  }
  return entries;
}

std::vector<OrderedJson> QuantizationProblemEntries(const MatchReport& report) {
  std::vector<OrderedJson> entries;
  if (!report.quantization.has_value()) return entries;
  for (const auto& [tensor, why] : report.quantization->problems) {
    OrderedJson entry;
    entry["tensor"] = tensor;
    entry["message"] = absl::StrCat(tensor, ": ", why, "; a dequantizing load refuses it");
    entry["fix"] =
        "use a complete, unconverted copy of the checkpoint (re-download the shard that holds it), or an "
        "unquantized export";
    entries.push_back(std::move(entry));
  }
  return entries;
}

bool DescribeStoredQuantized(const MatchReport& report, const std::string& tensor,
                             const std::string& stored_name, std::string* message, std::string* fix) {
  if (!report.quantization.has_value()) return false;
  const QuantizationMatch& q = *report.quantization;
  auto value = q.value_of_codes.find(stored_name);
  std::string name = value != q.value_of_codes.end() ? value->second : tensor;
  auto rule = q.value_rules.find(name);
  if (rule == q.value_rules.end()) return false;
  *message = absl::StrCat("stored quantized (", rule->second,
                          "): read without dequantization its codes would be taken for its values");
  *fix = kDequantizeFix;
  return true;
}

bool QuantizationPasses(const MatchReport& report) {
  return !report.quantization.has_value() ||
         (!report.quantization->Refused() && report.quantization->problems.empty());
}

std::optional<std::string> QuantizationVerdict(const MatchReport& report) {
  if (!report.quantization.has_value()) return std::nullopt;
  const QuantizationMatch& q = *report.quantization;
  if (q.Refused()) {
    return absl::StrCat("verdict: refused ", kEmDash, " the checkpoint is quantized with ",
                        q.declared->method, ", which metaload does not read (quantization, above)");
  }
  if (!q.problems.empty()) {
    return absl::StrCat("verdict: refused ", kEmDash, " ",
                        Plural(q.problems.size(), "stored tensor", "stored tensors"),
                        " of the quantization cannot be dequantized (quantization problems, above)");
  }
  if (report.refused_conversions.empty() || !q.declared.has_value()) return std::nullopt;
  for (const auto& [m, why] : report.refused_conversions) {
    if (q.value_of_codes.count(m.stored_as.empty() ? m.name : m.stored_as) == 0) return std::nullopt;
  }
  return absl::StrCat(
      "verdict: refused ", kEmDash, " ", Plural(report.refused_conversions.size(), "tensor", "tensors"),
      " stored as ", q.declared->method,
      " codes would be read as values without dequantization: load with --dequantize (`metactl "
      "check --dequantize` judges that load), or build the module quantized");
}

}  // namespace metaload
