#include "planner/format/quantization.h"

#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "util/json/json_util.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

using json_util::Json;

// A block edge longer than this is no block a checkpoint uses; bounds every multiplication below.
constexpr int64_t kMaxBlock = int64_t{1} << 20;
constexpr int64_t kMxfp4GroupValues = 32;  // values per E8M0 scale
constexpr int64_t kMxfp4GroupBytes = 16;   // two FP4 codes a byte

// Methods transformers knows that metaload does not read, with what to do instead.
const std::map<std::string, std::string>& UnsupportedMethods() {
  static const auto* kMethods = new std::map<std::string, std::string>{
      {"bitsandbytes", "bitsandbytes 4/8-bit weights pack their codes with state metaload does not read"},
      {"gptq", "GPTQ packs integer codes with zero points and a group order metaload does not read"},
      {"awq", "AWQ packs integer codes with zero points metaload does not read"},
      {"hqq", "HQQ codes are not read by metaload"},
      {"eetq", "EETQ int8 weights are not read by metaload"},
      {"aqlm", "AQLM codebooks are not read by metaload"},
      {"quanto", "optimum-quanto's tensors are not read by metaload"},
      {"torchao",
       "checkpoints torchao saved (its tensor subclasses serialized) are not read by metaload (FP8 "
       "checkpoints, fp8 and compressed-tensors, load into torchao's Float8Tensor)"},
      {"fbgemm_fp8", "fbgemm FP8's per-row scales are not read by metaload yet"},
      {"gguf", "GGUF is not safetensors"},
  };
  return *kMethods;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

absl::StatusOr<std::vector<int64_t>> BlockSize(const Json& value, absl::string_view where) {
  if (!value.is_array() || value.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": weight_block_size must be two integers, [rows, columns]"));
  }
  std::vector<int64_t> block;
  for (const Json& v : value) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > kMaxBlock) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": weight_block_size holds ", v.dump(),
                                                     ": each must be an integer in [1, ", kMaxBlock, "]"));
    }
    block.push_back(v.get<int64_t>());
  }
  return block;
}

// compressed-tensors: the weights' scheme, which every config group must share.
absl::Status ParseCompressedTensors(const Json& config, absl::string_view where, Quantization& q) {
  const auto unsupported = [&q](std::string why) {
    q.unsupported = std::move(why);
    return absl::OkStatus();
  };
  const Json* format = config.contains("format") ? &config["format"] : nullptr;
  if (format == nullptr || !format->is_string() || format->get<std::string>() != "float-quantized") {
    return unsupported(absl::StrCat("compressed-tensors format ",
                                    format == nullptr ? "(none)" : format->dump(),
                                    ": metaload reads float-quantized (FP8) only"));
  }
  if (!config.contains("config_groups") || !config["config_groups"].is_object() ||
      config["config_groups"].empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": compressed-tensors without config_groups"));
  }
  std::optional<std::string> strategy;
  std::vector<int64_t> block;
  for (const auto& [group, body] : config["config_groups"].items()) {
    const std::string at = absl::StrCat(where, ": config_groups.", group, ".weights");
    if (!body.is_object() || !body.contains("weights") || !body["weights"].is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(at, " is missing or not an object"));
    }
    const Json& w = body["weights"];
    const auto field = [&w](const char* key) { return w.contains(key) ? w[key] : Json(); };
    if (field("type") != Json("float") || field("num_bits") != Json(8)) {
      return unsupported(absl::StrCat(at, " is ", field("type").dump(), " with ", field("num_bits").dump(),
                                      " bits: metaload reads 8-bit float weights only"));
    }
    if (field("symmetric") == Json(false))
      return unsupported(absl::StrCat(at, " is asymmetric (zero points)"));
    const Json s = field("strategy");
    if (!s.is_string()) return absl::InvalidArgumentError(absl::StrCat(at, ".strategy is not a string"));
    const std::string name = s.get<std::string>();
    if (name != "channel" && name != "tensor" && name != "block") {
      return unsupported(
          absl::StrCat(at, ".strategy ", s.dump(), ": metaload reads channel, tensor and block"));
    }
    if (name == "block") {
      const Json b = field("block_structure");
      ML_ASSIGN_OR_RETURN(std::vector<int64_t> this_block,
                          BlockSize(b, absl::StrCat(at, ".block_structure")));
      if (!block.empty() && block != this_block)
        return unsupported(absl::StrCat(at, ": groups of several block sizes"));
      block = this_block;
    }
    if (strategy.has_value() && *strategy != name) {
      return unsupported(absl::StrCat("compressed-tensors groups of several strategies (", *strategy, ", ",
                                      name, "): metaload reads one scheme a checkpoint"));
    }
    strategy = name;
  }
  if (*strategy == "channel") q.scheme = QuantScheme::kFp8Channel;
  if (*strategy == "tensor") q.scheme = QuantScheme::kFp8Tensor;
  if (*strategy == "block") {
    q.scheme = QuantScheme::kFp8Block;
    q.block = block;
  }
  return absl::OkStatus();
}

bool IsFp8(DType d) { return d == DType::kF8E4M3 || d == DType::kF8E5M2; }
bool IsScaleFloat(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

// The scale name of an FP8 weight under `scheme` and method.
std::string Fp8ScaleName(const Quantization& q, const std::string& codes) {
  return q.method == "fp8" ? absl::StrCat(codes, "_scale_inv") : absl::StrCat(codes, "_scale");
}

// Why `scales` is not the scale tensor of FP8 `codes` under `q`; "" when it is.
std::string Fp8ScaleProblem(const Quantization& q, const TensorLayout& codes, const TensorLayout& scales,
                            std::vector<int64_t>& block) {
  if (!IsScaleFloat(scales.dtype)) {
    return absl::StrCat("its scale ", scales.name, " is ", DTypeCode(scales.dtype), ", not F32, BF16 or F16");
  }
  const std::vector<int64_t>& s = codes.shape;
  std::vector<int64_t> want;
  block.assign(s.size(), 1);
  switch (*q.scheme) {
    case QuantScheme::kFp8Block:
      if (s.size() < 2)
        return absl::StrCat("block-scaled FP8 weights have two dimensions or more, it has ", s.size());
      want = s;
      block[s.size() - 2] = q.block[0];
      block[s.size() - 1] = q.block[1];
      want[s.size() - 2] = CeilDiv(s[s.size() - 2], q.block[0]);
      want[s.size() - 1] = CeilDiv(s[s.size() - 1], q.block[1]);
      break;
    case QuantScheme::kFp8Channel:
      if (s.size() != 2)
        return absl::StrCat("per-channel FP8 weights have two dimensions, it has ", s.size());
      want = {s[0], 1};
      block[1] = s[1];
      break;
    case QuantScheme::kFp8Tensor:
      block = s;
      for (int64_t& b : block) b = std::max<int64_t>(b, 1);
      if (NumElements(scales.shape) == 1 && scales.shape.size() <= 1) return "";
      return absl::StrCat("its per-tensor scale ", scales.name, " has shape ", ShapeToString(scales.shape),
                          ", not [] or [1]");
    case QuantScheme::kMxfp4:
      return "not FP8";
  }
  if (scales.shape != want) {
    return absl::StrCat("its scale ", scales.name, " has shape ", ShapeToString(scales.shape), ", but a ",
                        ShapeToString(s), " weight in ", QuantSchemeName(*q.scheme),
                        q.block.empty() ? "" : absl::StrCat(" ", absl::StrJoin(q.block, "x")), " has ",
                        ShapeToString(want), " scales");
  }
  return "";
}

void FindFp8(const Quantization& q, const std::map<std::string, const TensorLayout*>& by_name,
             QuantizedSet& out) {
  for (const auto& [name, codes] : by_name) {
    if (!IsFp8(codes->dtype)) continue;
    const std::string scale_name = Fp8ScaleName(q, name);
    auto scales = by_name.find(scale_name);
    if (scales == by_name.end()) {
      out.problems[name] =
          absl::StrCat("stored as ", DTypeCode(codes->dtype), " codes, but the checkpoint has no ",
                       scale_name, " to scale them (a truncated or converted checkpoint?)");
      continue;
    }
    std::vector<int64_t> block;
    if (std::string why = Fp8ScaleProblem(q, *codes, *scales->second, block); !why.empty()) {
      out.problems[name] = why;
      out.problems[scale_name] = absl::StrCat("the scale of ", name, ": ", why);
      continue;
    }
    QuantizedValue v;
    v.name = name;
    v.scheme = *q.scheme;
    v.codes = *codes;
    v.scales = *scales->second;
    v.shape = v.grid_shape = codes->shape;
    for (size_t d = 0; d < v.shape.size(); ++d) v.grid_dim.push_back(static_cast<int>(d));
    v.scale_block = block;
    out.source_of[name] = name;
    out.source_of[scale_name] = name;
    out.values.emplace(name, std::move(v));
  }
}

void FindMxfp4(const std::map<std::string, const TensorLayout*>& by_name, QuantizedSet& out) {
  for (const auto& [name, codes] : by_name) {
    absl::string_view stem = name;
    if (!absl::ConsumeSuffix(&stem, "_blocks")) continue;
    const std::string value(stem), scale_name = absl::StrCat(stem, "_scales");
    auto scales = by_name.find(scale_name);
    std::string why;
    const std::vector<int64_t>& s = codes->shape;
    if (scales == by_name.end()) {
      why = absl::StrCat("MXFP4 codes without their scales ", scale_name);
    } else if (codes->dtype != DType::kU8 || scales->second->dtype != DType::kU8) {
      why = absl::StrCat("MXFP4 codes and scales are U8, these are ", DTypeCode(codes->dtype), " and ",
                         DTypeCode(scales->second->dtype));
    } else if (s.size() != 4 || s[3] != kMxfp4GroupBytes) {
      why = absl::StrCat("MXFP4 expert codes are [experts, rows, groups, 16], these are ", ShapeToString(s));
    } else if (scales->second->shape != std::vector<int64_t>{s[0], s[1], s[2]}) {
      why = absl::StrCat("its scales ", scale_name, " have shape ", ShapeToString(scales->second->shape),
                         ", not [", s[0], ", ", s[1], ", ", s[2], "]");
    }
    if (!why.empty()) {
      out.problems[name] = why;
      if (scales != by_name.end()) out.problems[scale_name] = why;
      continue;
    }
    QuantizedValue v;
    v.name = value;
    v.scheme = QuantScheme::kMxfp4;
    v.codes = *codes;
    v.scales = *scales->second;
    v.grid_shape = {s[0], s[1], s[2] * kMxfp4GroupValues};
    v.shape = {s[0], s[2] * kMxfp4GroupValues, s[1]};
    v.grid_dim = {0, 2, 1};
    v.scale_block = {1, 1, kMxfp4GroupValues};
    out.source_of[name] = value;
    out.source_of[scale_name] = value;
    out.values.emplace(value, std::move(v));
  }
}

}  // namespace

const char* QuantSchemeName(QuantScheme scheme) {
  switch (scheme) {
    case QuantScheme::kFp8Block:
      return "fp8-block";
    case QuantScheme::kFp8Channel:
      return "fp8-channel";
    case QuantScheme::kFp8Tensor:
      return "fp8-tensor";
    case QuantScheme::kMxfp4:
      return "mxfp4";
  }
  return "?";
}

std::string Quantization::Capability() const {
  if (!scheme.has_value()) return absl::StrCat("refused: ", unsupported);
  return "dequantize on load (dequantize=True, metactl load --dequantize), or keep as stored in a module "
         "built with its quantization";
}

std::string Quantization::Description() const {
  if (!scheme.has_value()) return absl::StrCat(method, " (not read by metaload)");
  switch (*scheme) {
    case QuantScheme::kFp8Block:
      return absl::StrCat(method, ": FP8 codes, one scale per ", absl::StrJoin(block, "x"), " block");
    case QuantScheme::kFp8Channel:
      return absl::StrCat(method, ": FP8 codes, one scale per output channel");
    case QuantScheme::kFp8Tensor:
      return absl::StrCat(method, ": FP8 codes, one scale per tensor");
    case QuantScheme::kMxfp4:
      return absl::StrCat(method, ": FP4 E2M1 codes, one E8M0 scale per 32 values");
  }
  return method;
}

absl::StatusOr<std::optional<Quantization>> ParseQuantization(absl::string_view config_json,
                                                              absl::string_view where) {
  ML_ASSIGN_OR_RETURN(Json root, json_util::Parse(config_json, where));
  if (!root.is_object() || !root.contains("quantization_config")) return std::nullopt;
  const Json& config = root["quantization_config"];
  if (config.is_null()) return std::nullopt;
  const std::string at = absl::StrCat(where, ": quantization_config");
  if (!config.is_object()) return absl::InvalidArgumentError(absl::StrCat(at, " is not an object"));
  Quantization q;
  if (!config.contains("quant_method") || !config["quant_method"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(at, " has no quant_method string"));
  }
  q.method = config["quant_method"].get<std::string>();
  if (q.method == "fp8") {
    if (!config.contains("weight_block_size") || config["weight_block_size"].is_null()) {
      q.unsupported =
          "fp8 without weight_block_size (per-tensor FP8 of this method) is not read by metaload yet";
      return q;
    }
    ML_ASSIGN_OR_RETURN(q.block, BlockSize(config["weight_block_size"], at));
    if (config.contains("fmt") && config["fmt"] != Json("e4m3")) {
      q.unsupported = absl::StrCat("fp8 fmt ", config["fmt"].dump(), ": metaload reads e4m3");
      return q;
    }
    q.scheme = QuantScheme::kFp8Block;
  } else if (q.method == "compressed-tensors") {
    ML_RETURN_IF_ERROR(ParseCompressedTensors(config, at, q));
  } else if (q.method == "mxfp4") {
    q.scheme = QuantScheme::kMxfp4;
  } else {
    auto known = UnsupportedMethods().find(q.method);
    q.unsupported =
        known != UnsupportedMethods().end()
            ? absl::StrCat(known->second, "; load a BF16 export of the model")
            : absl::StrCat("quant_method ", json_util::Quote(q.method),
                           " is not one metaload reads (fp8, compressed-tensors float-quantized, mxfp4)");
  }
  return q;
}

std::string QuantizedValue::Rule() const {
  std::string how = QuantSchemeName(scheme);
  if (scheme == QuantScheme::kFp8Block) {
    how = absl::StrCat(how, " ", scale_block[scale_block.size() - 2], "x", scale_block.back());
  }
  return absl::StrCat(how, ": ", codes.name, " ", DTypeCode(codes.dtype), " x ", scales.name, " ",
                      DTypeCode(scales.dtype));
}

QuantizedSet FindQuantized(const Quantization& q, const std::vector<TensorLayout>& stored) {
  QuantizedSet out;
  if (!q.scheme.has_value()) return out;
  std::map<std::string, const TensorLayout*> by_name;
  for (const TensorLayout& t : stored) by_name.emplace(t.name, &t);
  if (*q.scheme == QuantScheme::kMxfp4) {
    FindMxfp4(by_name, out);
  } else {
    FindFp8(q, by_name, out);
  }
  return out;
}

}  // namespace metaload
