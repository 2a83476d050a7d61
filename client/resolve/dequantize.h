// A quantized value's elements from its codes and scales (planner/format/quantization.h), by the
// format's own definition, on the destination's device:
//   fp8 (block, channel, tensor): f32(code) x f32(scale) — DeepSeek's weight_dequant, the
//     compressed-tensors dequantization with the product in float32;
//   mxfp4 (OCP MX): FP4 E2M1 value x 2^(scale - 127), scale 255 NaN; the codes' low nibble first.
// Each product is computed in float32 (exact for MXFP4; one rounding for FP8) and rounded once,
// to nearest even, to the destination's dtype. Worked in slabs of rows, so that no temporary
// of the whole box exists beside the destination.
//
//   ML_RETURN_IF_ERROR(DequantizeInto(value, box, codes, scales, dest));
//
// Thread-safety: reentrant; writes `dest` only.
#ifndef METALOAD_CLIENT_RESOLVE_DEQUANTIZE_H_
#define METALOAD_CLIENT_RESOLVE_DEQUANTIZE_H_

#include <torch/types.h>

#include "absl/status/status.h"
#include "planner/format/quantization.h"
#include "planner/plan/slice.h"

namespace metaload {

// `codes`: the bytes of CodeBox(v, box) in the codes' stored dtype, shaped as that box; `scales`:
// ScaleBox(v, box)'s, in the scales' stored dtype (planner/plan/quant_boxes.h). `dest`: the
// box's shape, a floating dtype. InvalidArgument when a tensor's shape is not the box's.
absl::Status DequantizeInto(const QuantizedValue& v, const TensorBox& box, const at::Tensor& codes,
                            const at::Tensor& scales, at::Tensor& dest);

}  // namespace metaload

#endif  // METALOAD_CLIENT_RESOLVE_DEQUANTIZE_H_
