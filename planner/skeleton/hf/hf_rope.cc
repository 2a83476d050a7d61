// Mirrors transformers' modeling_rope_utils (ROPE_INIT_FUNCTIONS) and each model's
// compute_default_rope_parameters: which keys are read, their defaults, and the rotary dim.
#include "planner/skeleton/hf/hf_rope.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/json/strict_json.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

using Json = nlohmann::json;

constexpr absl::string_view kRopeTypes = "default, linear, dynamic, llama3, yarn, longrope";

// The RoPE parameter object: transformers >= 5 writes "rope_parameters"; older configs have
// "rope_scaling" (null when plain RoPE) and a top-level "rope_theta". A non-empty rope_scaling
// wins, as in transformers' convert_rope_params_to_dict.
class RopeParams {
 public:
  explicit RopeParams(const HfConfigReader& config) : config_(config) {}

  absl::Status Init() {
    const Json* scaling = config_.Find({"rope_scaling"});
    if (scaling != nullptr && !(scaling->is_object() && scaling->empty())) {
      if (!scaling->is_object()) return NotAnObject("rope_scaling", *scaling);
      params_ = scaling;
      key_ = config_.QualifiedKey("rope_scaling");
      return absl::OkStatus();
    }
    if (const Json* parameters = config_.Find({"rope_parameters"})) {
      if (!parameters->is_object()) return NotAnObject("rope_parameters", *parameters);
      params_ = parameters;
      key_ = config_.QualifiedKey("rope_parameters");
    }
    return absl::OkStatus();
  }

  const Json* Get(absl::string_view name) const {
    if (params_ == nullptr) return nullptr;
    auto it = params_->find(std::string(name));
    return it == params_->end() || it->is_null() ? nullptr : &*it;
  }

  absl::Status ParamError(absl::string_view name, absl::string_view what) const {
    return config_.Error(absl::StrCat("\"", key_, ".", name, "\": ", what));
  }

  // A positive finite number from the parameters, else `fallback` (none: required).
  absl::StatusOr<double> Positive(absl::string_view name,
                                  std::optional<double> fallback = std::nullopt) const {
    const Json* value = Get(name);
    if (value == nullptr) {
      if (fallback.has_value()) return *fallback;
      return config_.Error(absl::StrCat("\"", key_, "\" has no \"", name, "\" (its rope_type needs it)"));
    }
    if (!value->is_number() || !(value->get<double>() > 0) || !(value->get<double>() < 1e300)) {
      return ParamError(name, absl::StrCat("expected a positive number, found ", JsonForMessage(*value)));
    }
    return value->get<double>();
  }

  // transformers reads these as `get(name) or default`: 0 means the default too.
  absl::StatusOr<double> PositiveOrDefaultForZero(absl::string_view name, double fallback) const {
    const Json* value = Get(name);
    if (value != nullptr && value->is_number() && value->get<double>() == 0) return fallback;
    return Positive(name, fallback);
  }

  absl::StatusOr<std::string> Type(bool phi3) const {
    const Json* value = Get("rope_type");
    absl::string_view name = "rope_type";
    if (value == nullptr) {
      value = Get("type");
      name = "type";
    }
    if (value == nullptr) return std::string("default");
    if (!value->is_string()) {
      return ParamError(name, absl::StrCat("expected a string, found ", JsonForMessage(*value)));
    }
    std::string type = value->get<std::string>();
    if (phi3 && (type == "su" || type == "yarn")) return std::string("longrope");
    if (type != "default" && type != "linear" && type != "dynamic" && type != "llama3" && type != "yarn" &&
        type != "longrope") {
      return ParamError(
          name, absl::StrCat("RoPE type \"", type, "\" is not supported (supported: ", kRopeTypes, ")"));
    }
    return type;
  }

 private:
  absl::Status NotAnObject(absl::string_view key, const Json& value) const {
    return config_.KeyError(key, absl::StrCat("expected an object, found ", JsonForMessage(value)));
  }

  const HfConfigReader& config_;
  const Json* params_ = nullptr;
  std::string key_;
};

// A number from the RoPE parameters, else from the top level, else `fallback`.
absl::StatusOr<double> ParamOrTopLevel(const RopeParams& params, const HfConfigReader& config,
                                       absl::string_view name, double fallback) {
  if (params.Get(name) != nullptr) return params.Positive(name);
  ML_ASSIGN_OR_RETURN(double value, config.NumberOr(name, fallback));
  if (!(value > 0)) return config.KeyError(name, "must be positive");
  return value;
}

// transformers' standardize_rope_params: a top-level original_max_position_embeddings wins
// (Phi3 keeps it there), then the parameters' own, then max_position_embeddings.
absl::StatusOr<double> OriginalMaxPositions(const RopeParams& params, const HfConfigReader& config,
                                            const RopeOptions& options) {
  if (config.Has("original_max_position_embeddings")) {
    ML_ASSIGN_OR_RETURN(int64_t value, config.Dim({"original_max_position_embeddings"}));
    return static_cast<double>(value);
  }
  if (params.Get("original_max_position_embeddings") != nullptr) {
    return params.Positive("original_max_position_embeddings");
  }
  if (options.phi3) return 4096.0;
  ML_ASSIGN_OR_RETURN(int64_t value, config.Dim({"max_position_embeddings"}));
  return static_cast<double>(value);
}

std::string Arg(absl::string_view name, double value) {
  return absl::StrCat(name, "=", FormatRuleNumber(value));
}

absl::StatusOr<std::string> ScalingRule(const std::string& type, const RopeParams& params,
                                        const HfConfigReader& config, const RopeOptions& options,
                                        int64_t length) {
  if (type == "linear" || type == "dynamic") {
    ML_ASSIGN_OR_RETURN(double factor, params.Positive("factor"));
    return absl::StrCat(type, "(", Arg("factor", factor), ")");
  }
  if (type == "llama3") {
    ML_ASSIGN_OR_RETURN(double factor, params.Positive("factor"));
    ML_ASSIGN_OR_RETURN(double low, params.Positive("low_freq_factor"));
    ML_ASSIGN_OR_RETURN(double high, params.Positive("high_freq_factor"));
    if (!(high > low)) return params.ParamError("high_freq_factor", "must be greater than low_freq_factor");
    ML_ASSIGN_OR_RETURN(double original, OriginalMaxPositions(params, config, options));
    return absl::StrCat("llama3(", Arg("factor", factor), ",", Arg("low_freq_factor", low), ",",
                        Arg("high_freq_factor", high), ",", Arg("original_max_position_embeddings", original),
                        ")");
  }
  if (type == "yarn") {
    ML_ASSIGN_OR_RETURN(double original, OriginalMaxPositions(params, config, options));
    double factor = 0;
    if (params.Get("factor") != nullptr) {
      ML_ASSIGN_OR_RETURN(factor, params.Positive("factor"));
    } else {
      ML_ASSIGN_OR_RETURN(int64_t max_positions, config.Dim({"max_position_embeddings"}));
      factor = static_cast<double>(max_positions) / original;
    }
    ML_ASSIGN_OR_RETURN(double beta_fast, params.PositiveOrDefaultForZero("beta_fast", 32));
    ML_ASSIGN_OR_RETURN(double beta_slow, params.PositiveOrDefaultForZero("beta_slow", 1));
    bool truncate = true;
    if (const Json* value = params.Get("truncate")) {
      if (!value->is_boolean()) return params.ParamError("truncate", "expected true or false");
      truncate = value->get<bool>();
    }
    return absl::StrCat("yarn(", Arg("factor", factor), ",",
                        Arg("original_max_position_embeddings", original), ",", Arg("beta_fast", beta_fast),
                        ",", Arg("beta_slow", beta_slow), ",truncate=", truncate ? "true" : "false", ")");
  }
  if (type == "longrope") {
    // At init (no sequence seen yet) transformers uses short_factor; long_factor replaces it
    // at run time past original_max_position_embeddings.
    const Json* short_factor = params.Get("short_factor");
    if (short_factor == nullptr) return params.ParamError("short_factor", "missing (longrope needs it)");
    if (!short_factor->is_array() || static_cast<int64_t>(short_factor->size()) != length) {
      return params.ParamError(
          "short_factor", absl::StrCat("expected an array of ", length, " numbers (rotary dim / 2), found ",
                                       JsonForMessage(*short_factor)));
    }
    std::vector<std::string> numbers;
    for (const Json& value : *short_factor) {
      if (!value.is_number() || !(value.get<double>() > 0) || !(value.get<double>() < 1e300)) {
        return params.ParamError("short_factor",
                                 absl::StrCat("expected positive numbers, found ", JsonForMessage(value)));
      }
      numbers.push_back(FormatRuleNumber(value.get<double>()));
    }
    return absl::StrCat("longrope(short_factor=[", absl::StrJoin(numbers, ","), "])");
  }
  return std::string();
}

}  // namespace

absl::StatusOr<RopeBuffer> RopeInvFreq(const HfConfigReader& config, int64_t head_dim,
                                       const RopeOptions& options) {
  RopeParams params(config);
  ML_RETURN_IF_ERROR(params.Init());
  ML_ASSIGN_OR_RETURN(std::string type, params.Type(options.phi3));
  ML_ASSIGN_OR_RETURN(double theta, ParamOrTopLevel(params, config, "rope_theta", options.default_theta));
  ML_ASSIGN_OR_RETURN(double partial, ParamOrTopLevel(params, config, "partial_rotary_factor", 1.0));
  if (partial > 1) return config.Error("partial_rotary_factor must be in (0, 1]");

  // Every scaled type takes int(head_dim * partial_rotary_factor); the plain type of every
  // model here but Phi3 ignores the factor.
  int64_t dim = head_dim;
  if (type != "default" || options.phi3) dim = static_cast<int64_t>(static_cast<double>(head_dim) * partial);
  if (dim < 1) return config.Error(absl::StrCat("partial_rotary_factor leaves a rotary dim of ", dim));

  RopeBuffer buffer;
  buffer.length = (dim + 1) / 2;
  ML_ASSIGN_OR_RETURN(std::string scaling, ScalingRule(type, params, config, options, buffer.length));
  buffer.init = absl::StrCat("rope_inv_freq(", Arg("base", theta), ",dim=", dim,
                             scaling.empty() ? "" : ",scaling=", scaling, ")");
  return buffer;
}

}  // namespace metaload
