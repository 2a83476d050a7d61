// Which bytes of a quantized value's codes and scales (planner/format/quantization.h) a holder
// of a box of the value reads, and which it proves.
//
// A value's dimensions map to its "grid" (the value before any swap); codes and scales cover the
// grid in blocks. A rank holding a box of the value reads the codes and scale blocks that cover
// it — no other — and proves (hashes) only the blocks whose first element lies in its box, so
// that the ranks holding one copy of the value prove each block exactly once, whatever the
// split: a block a shard boundary cuts through is read by both sides and proven by one.
//
//   SourceBoxes scales = ScaleBoxes(value, held_box);   // read: blocks covering it; proven: its own
//
// Pure.
#ifndef METALOAD_PLANNER_PLAN_QUANT_BOXES_H_
#define METALOAD_PLANNER_PLAN_QUANT_BOXES_H_

#include <optional>
#include <string>

#include "planner/format/quantization.h"
#include "planner/plan/slice.h"

namespace metaload {

// The box of a stored source (codes or scales) a holder of a value box reads, and the part of it
// that holder proves: nullopt when it proves none of it (another holder does) or reads nothing.
struct SourceBoxes {
  std::optional<TensorBox> read;
  std::optional<TensorBox> proven;
};
// REQUIRES: `value_box` lies inside v.shape (validated at the edge, as every request box).
SourceBoxes CodeBoxes(const QuantizedValue& v, const TensorBox& value_box);
SourceBoxes ScaleBoxes(const QuantizedValue& v, const TensorBox& value_box);

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
