// The skeleton of the floating-point module a dequantizing load fills, from a skeleton derived
// from a quantized checkpoint's headers (which names codes and scales, not values): each value's
// codes become the value (its name and shape, planner/format/quantization.h QuantizedValue) held in
// `held`, and its scale tensors go. `metactl check --dequantize` and `metactl plan --dequantize` judge
// a folder whose architecture has no built-in skeleton against it (docs/quantization.md).
//
//   Skeleton module = DequantizedSkeleton(derived, FindQuantized(q, checkpoint.tensors), DType::kBF16);
//
// Pure.
#ifndef METALOAD_PLANNER_SKELETON_DEQUANTIZED_SKELETON_H_
#define METALOAD_PLANNER_SKELETON_DEQUANTIZED_SKELETON_H_

#include "planner/format/quantization.h"
#include "planner/skeleton/skeleton.h"

namespace metaload {

// Tensors that are no value's codes or scales are kept as they are, in order; tied groups that
// name a dropped scale lose it (a group left with one name is dropped).
Skeleton DequantizedSkeleton(const Skeleton& derived, const QuantizedSet& set, DType held);

}  // namespace metaload

#endif  // METALOAD_PLANNER_SKELETON_DEQUANTIZED_SKELETON_H_
