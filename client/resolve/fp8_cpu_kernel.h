// The CPU kernel of FP8 dequantization (dequantize.h's rule, fused): each code through a 256-entry
// table of its float32 value, times its scale in float32, rounded once to the destination's dtype
// (c10's round-to-nearest-even, the conversion torch's own copy_ makes), written straight into
// the destination: no float32 temporary, rows in parallel on torch's intra-op threads. Bit for
// bit what the general path computes (torch's F8 -> F32 conversion is exact, as is the table),
// about 10x faster on CPU (torch converts FP8 element by element).
//
// Thread-safety: reentrant.
#ifndef METALOAD_CLIENT_RESOLVE_FP8_CPU_KERNEL_H_
#define METALOAD_CLIENT_RESOLVE_FP8_CPU_KERNEL_H_

#include <torch/types.h>

#include "planner/format/quantization.h"
#include "planner/plan/slice.h"

namespace metaload {

// Dequantizes when it applies: an FP8 scheme with 2-D values, `codes` (F8_E4M3 or F8_E5M2, the
// box's shape, contiguous) and float32 `scales` (ScaleBox's, contiguous) on the CPU, and a CPU
// `dest` of BF16, F16 or F32 whose rows are contiguous. Returns false, touching nothing, when it
// does not: the caller takes the general path.
bool DequantizeFp8OnCpu(const QuantizedValue& v, const TensorBox& box, const TensorBox& scale_box,
                        const at::Tensor& codes, const at::Tensor& scales, at::Tensor& dest);

}  // namespace metaload

#endif  // METALOAD_CLIENT_RESOLVE_FP8_CPU_KERNEL_H_
