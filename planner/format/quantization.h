// What a quantized checkpoint is, from its config's `quantization_config` and its stored tensors:
// the one rule the doctor (`metactl check`), the planner and the rank's dequantization
// (client/resolve/dequantize.h) share (docs/quantization.md).
//
// A quantized value (what a BF16 module holds as `x.weight`) is stored as codes and scales:
//   - fp8 (DeepSeek-V3/R1, Kimi-K2, Qwen3 FP8, transformers' FineGrainedFP8): `x.weight` F8_E4M3
//     and `x.weight_scale_inv` F32, one per weight_block_size block (128x128; the last block of
//     each dimension partial). value = f32(code) x f32(scale_inv[i / 128][j / 128]).
//   - compressed-tensors float-quantized (llm-compressor "FP8-dynamic"): `x.weight` F8_E4M3 and
//     `x.weight_scale`, per output channel ([N, 1]), per tensor ([] or [1]) or per block.
//     value = f32(code) x f32(scale).
//   - mxfp4 (gpt-oss, OCP MX): `x_blocks` U8 [E, R, G, 16] (two FP4 E2M1 codes a byte, low nibble
//     first) and `x_scales` U8 [E, R, G] (E8M0: 2^(s - 127), 255 is NaN), 32 values a scale;
//     the value `x` is the unpacked [E, R, 32 G] with its last two dimensions swapped, [E, 32 G, R],
//     as transformers' gpt-oss module holds it.
// Every product is computed in float32 and rounded once to the module's dtype: the named rule
// a dequantized tensor's content is "computed by".
//
// Which codes and scales a rank's part of a value needs: planner/plan/quant_boxes.h.
//
//   ML_ASSIGN_OR_RETURN(std::optional<Quantization> q, ParseQuantization(config_json, "config.json"));
//   QuantizedSet set = FindQuantized(*q, checkpoint.tensors);
//
// Pure, torch-free.
#ifndef METALOAD_PLANNER_FORMAT_QUANTIZATION_H_
#define METALOAD_PLANNER_FORMAT_QUANTIZATION_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/format/tensor_layout.h"

namespace metaload {

enum class QuantScheme {
  kFp8Block,    // FP8 codes, one scale per block of `block` elements
  kFp8Channel,  // FP8 codes, one scale per output channel (row)
  kFp8Tensor,   // FP8 codes, one scale for the whole tensor
  kMxfp4,       // packed FP4 E2M1 codes, one E8M0 scale per 32 values of a row
};

// "fp8-block", "fp8-channel", "fp8-tensor", "mxfp4".
const char* QuantSchemeName(QuantScheme scheme);

// What a config's quantization_config declares.
struct Quantization {
  std::string method;  // its quant_method: "fp8", "compressed-tensors", "mxfp4", "bitsandbytes", ...
  // Set when metaload can read it; absent: `unsupported` says why and what to do.
  std::optional<QuantScheme> scheme;
  std::vector<int64_t> block;  // kFp8Block: elements per scale along the last two dimensions
  std::string unsupported;
  // "dequantize on load (dequantize=True, --dequantize) or keep as stored" / the refusal: what the
  // doctor says metaload can do with it.
  std::string Capability() const;
  // "fp8 (FP8 E4M3 codes, one F32 scale per 128x128 block)": for messages.
  std::string Description() const;
};

// The `quantization_config` of a config.json's text (its root object), nullopt when it has none.
// InvalidArgument, prefixed by `where`, for a quantization_config that is not an object or a
// supported method with out-of-range settings (a block size of 0 or over 2^20, say); an unknown or
// unsupported method is no error: `scheme` is absent and `unsupported` says so.
absl::StatusOr<std::optional<Quantization>> ParseQuantization(absl::string_view config_json,
                                                              absl::string_view where);

// One value stored as codes and scales.
struct QuantizedValue {
  std::string name;  // the value's name, as a module holds it: "x.weight", MXFP4 "x.gate_up_proj"
  QuantScheme scheme = QuantScheme::kFp8Block;
  TensorLayout codes;
  TensorLayout scales;
  std::vector<int64_t> shape;       // the value's shape
  std::vector<int64_t> grid_shape;  // the value before any swap: codes' logical shape
  // value dimension d is grid dimension grid_dim[d] (identity but for MXFP4's swap of the last two)
  std::vector<int> grid_dim;
  // Grid elements per scale, per grid dimension (a per-tensor scale: the whole grid).
  std::vector<int64_t> scale_block;
  // "fp8-block 128x128: x.weight F8_E4M3 x x.weight_scale_inv F32": the rule, for provenance.
  std::string Rule() const;
  // Bytes of codes and scales as stored.
  uint64_t StoredBytes() const { return codes.size_bytes() + scales.size_bytes(); }
};

struct QuantizedSet {
  std::map<std::string, QuantizedValue> values;  // by value name
  // Stored names that are codes or scales of a value, to the value's name.
  std::map<std::string, std::string> source_of;
  // Stored tensors the quantization says are codes or scales that do not fit it (an FP8 weight
  // with no scale beside it, a scale of the wrong shape or dtype): name -> why. Each such tensor
  // is refused by a load that would dequantize it.
  std::map<std::string, std::string> problems;
};

// Pairs the codes and scales of `stored` under `q` (q.scheme set). Stored tensors of other
// dtypes (a BF16 lm_head a config leaves unquantized) are not values.
QuantizedSet FindQuantized(const Quantization& q, const std::vector<TensorLayout>& stored);

}  // namespace metaload

#endif  // METALOAD_PLANNER_FORMAT_QUANTIZATION_H_
