// Which bytes of a quantized value's codes and scales (planner/format/quantization.h) a holder
// of a box of the value reads, and which it proves.
//
// A value's dimensions map to its "grid" (the value before any swap); codes and scales cover the
// grid in blocks. A rank holding a box of the value reads the codes that cover it (FP8: exactly
// its box; MXFP4: the 32-value groups it touches) and, of the scales, the blocks that cover it on
// every dimension but the last, whole along the last: a scale row is a handful of bytes, and
// rows read whole keep every digest tile of the scale tensor whole (util/hash/tile_digest.h), so
// the sum over ranks proves the scales as it proves any tensor. Splits on block boundaries have
// every block read by one rank per copy (each copy of the scales checked); a split through a
// block has both neighbours read that block, which the sum cannot check: loaded exactly, that
// source reported unproven (docs/quantization.md).
//
//   std::optional<TensorBox> scales = ScaleBox(value, held_box);   // nullopt: an empty box
//
// Pure.
#ifndef METALOAD_PLANNER_PLAN_QUANT_BOXES_H_
#define METALOAD_PLANNER_PLAN_QUANT_BOXES_H_

#include <optional>
#include <string>

#include "planner/format/quantization.h"
#include "planner/plan/slice.h"

namespace metaload {

// The box of the codes / scales a holder of `value_box` reads; nullopt for an empty box.
// REQUIRES: `value_box` lies inside v.shape (validated at the edge, as every request box).
std::optional<TensorBox> CodeBox(const QuantizedValue& v, const TensorBox& value_box);
std::optional<TensorBox> ScaleBox(const QuantizedValue& v, const TensorBox& value_box);

// The value box in grid coordinates (the value's box with MXFP4's swap undone), and back.
TensorBox GridBox(const QuantizedValue& v, const TensorBox& value_box);
std::vector<int64_t> GridToValue(const QuantizedValue& v, const std::vector<int64_t>& grid);

// Keeping a value quantized: "" when a holder of `codes_box` of the codes and `scales_box` of the
// scales holds exactly the scales of its codes (every boundary of codes_box on a block boundary
// or the tensor's end, and scales_box the blocks it covers); else why not, naming the nearest
// split that works.
std::string KeptSplitProblem(const QuantizedValue& v, const TensorBox& codes_box,
                             const TensorBox& scales_box);

}  // namespace metaload

#endif  // METALOAD_PLANNER_PLAN_QUANT_BOXES_H_
