#include "daemon/plans/quantized_plan.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "planner/skeleton/dequantized_skeleton.h"
#include "util/error_kind.h"
#include "util/json/json_util.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// The ranks get the quantization_config object alone, not the whole config.json (up to 256 KiB,
// once per rank): it is all that ParseQuantization reads.
absl::StatusOr<std::string> QuantizationConfigJson(const std::string& config_json, const std::string& where) {
  ML_ASSIGN_OR_RETURN(json_util::Json config, json_util::Parse(config_json, where));
  json_util::Json out = json_util::Json::object();
  out["quantization_config"] = config["quantization_config"];
  return out.dump();
}

// A skeleton derived from the headers names some value's scales: it is the stored tensors, not a
// module, and a dequantizing load fills the module of its values instead.
bool NamesScales(const Skeleton& skeleton, const QuantizedSet& set) {
  for (const SkeletonTensor& t : skeleton.tensors) {
    auto source = set.source_of.find(t.name);
    if (source != set.source_of.end() && set.values.at(source->second).scales.name == t.name) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<QuantizedPlanInputs> QuantizedPlanOf(const RegisteredModel& model,
                                                    const StrategyOptions& options) {
  QuantizedPlanInputs out;
  const ModelRecord& record = model.record;
  const std::string where = absl::StrCat("the config.json ", record.name, " was registered with");
  std::optional<Quantization> declared;
  if (!record.hf_config_json.empty()) {
    absl::StatusOr<std::optional<Quantization>> parsed = ParseQuantization(record.hf_config_json, where);
    // Without --dequantize a quantization_config it cannot read plans as it always did.
    if (!parsed.ok() && options.dequantize) return WithErrorKind(parsed.status(), ErrorKind::kBadInput);
    if (parsed.ok()) declared = *std::move(parsed);
  }
  if (!declared.has_value() || !declared->scheme.has_value()) {
    if (!options.dequantize) return out;
    return WithErrorKind(
        absl::FailedPreconditionError(absl::StrCat(
            "--dequantize: ",
            record.hf_config_json.empty() ? "model " + record.name +
                                                " was registered without a "
                                                "config.json, which"
                                          : where,
            " declares no quantization metaload reads",
            declared.has_value() ? absl::StrCat(" (", declared->Capability(), ")") : std::string(),
            "; load it without --dequantize")),
        ErrorKind::kBadInput);
  }
  out.set = FindQuantized(*declared, record.checkpoint.tensors);
  if (!options.dequantize) {
    // Held as a float, a value's codes would be read as its values: DeepSeek's FP8 release
    // registered with its Llama-style module, say.
    for (const SkeletonTensor& t : model.skeleton.tensors) {
      if (!t.persistent || !IsConvertibleFloat(t.dtype) || !out.set.values.count(t.name)) continue;
      const QuantizedValue& v = out.set.values.at(t.name);
      return RefusedModelError(absl::StrCat(
          "model ", record.name, " is stored quantized (", declared->Description(), "): ", t.name, " is ",
          DTypeCode(t.dtype), " in its skeleton but stored as ", v.Rule(),
          ", and read without dequantization its codes would be taken for its values; load with --dequantize "
          "(dequantize=True), or build the module with the checkpoint's quantization_config"));
    }
    out.set = QuantizedSet{};
    return out;
  }
  if (!out.set.problems.empty()) {
    const auto& [tensor, why] = *out.set.problems.begin();
    return RefusedModelError(absl::StrCat("--dequantize: model ", record.name, ": ", out.set.problems.size(),
                                          out.set.problems.size() == 1 ? " stored tensor" : " stored tensors",
                                          " cannot be dequantized, first ", tensor, ": ", why,
                                          "; `metactl check --dequantize` names each"));
  }
  out.dequantize = true;
  if (NamesScales(model.skeleton, out.set)) {
    out.skeleton = DequantizedSkeleton(model.skeleton, out.set, options.load_dtype.value_or(DType::kBF16));
  }
  ML_ASSIGN_OR_RETURN(out.quantization_config_json, QuantizationConfigJson(record.hf_config_json, where));
  return out;
}

}  // namespace metaload
