#include "planner/format/dtype_conversion.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace metaload {
namespace {

// The names quantized checkpoints keep a weight's scales under, beside `W.weight`: DeepSeek and
// transformers FP8 (`W.weight_scale_inv`, one per 128x128 block), compressed-tensors
// (`W.weight_scale`), MXFP4 (`W_blocks` with `W_scales`).
std::vector<std::string> ScaleNames(absl::string_view name) {
  std::vector<std::string> out = {absl::StrCat(name, "_scale_inv"), absl::StrCat(name, "_scale")};
  absl::string_view stem = name;
  if (absl::ConsumeSuffix(&stem, "_blocks")) out.push_back(absl::StrCat(stem, "_scales"));
  return out;
}

const char* Encoding(DType dtype) {
  switch (dtype) {
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return "FP8 codes";
    case DType::kU8:
    case DType::kI8:
      return "8-bit integer codes";
    default:
      return "integers";
  }
}

}  // namespace

std::string ConversionRefusal(absl::string_view name, DType stored, DType held,
                              const std::function<bool(const std::string&)>& has_stored) {
  if (stored == held || (IsConvertibleFloat(stored) && IsConvertibleFloat(held))) return "";
  if (IsConvertibleFloat(stored)) {
    return absl::StrCat("stored as ", DTypeCode(stored), ", the module holds ", DTypeCode(held),
                        ": a cast to it would not keep the values; build the module in a floating dtype");
  }
  std::vector<std::string> scales;
  for (const std::string& scale : ScaleNames(name)) {
    if (has_stored && has_stored(scale)) scales.push_back(scale);
  }
  const std::string quantized =
      scales.empty() ? absl::StrCat("stored as ", DTypeCode(stored), " (", Encoding(stored), ")")
                     : absl::StrCat("stored quantized as ", DTypeCode(stored), " ", Encoding(stored),
                                    " with scales beside it (", absl::StrJoin(scales, ", "), ")");
  return absl::StrCat(
      quantized, ": read as ", DTypeCode(held),
      " its codes would not be its values, whatever strict says; metaload dequantizes only what the "
      "quantization_config of a config.json declares (docs/quantization.md): load it into a module of its "
      "stored dtype (",
      DTypeCode(stored), "), or dequantize the checkpoint first");
}

}  // namespace metaload
