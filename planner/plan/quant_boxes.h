// Which bytes of a quantized value's codes and scales (planner/format/quantization.h) a holder
// of a box of the value reads, and which it proves.
//
// A value's dimensions map to its "grid" (the value before any swap); codes and scales cover the
// grid in blocks. A rank holding a box of the value reads exactly the codes of its box (MXFP4:
// the 32-value groups of it, a split through a group refused: CutGroupProblem) and scales that
// every rank holding any of the value reads alike, so that the sum over ranks (util/hash/
// tile_digest.h) proves them as it proves any tensor, never counting a block twice by one rank
// and once by another: an FP8 value's whole scale tensor (1/4096 of its codes' bytes in 128x128
// blocks; a per-channel scale 1/K), an MXFP4 value's scale rows of the experts and rows it holds,
// whole along the groups.
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
// "" unless `value_box` of an MXFP4 value cuts through a 32-value group; then why it is refused.
std::string CutGroupProblem(const QuantizedValue& v, const TensorBox& value_box);

// The value box in grid coordinates (the value's box with MXFP4's swap undone), and back.
TensorBox GridBox(const QuantizedValue& v, const TensorBox& value_box);
std::vector<int64_t> GridToValue(const QuantizedValue& v, const std::vector<int64_t>& grid);

// Keeping a value quantized: "" when a holder of `codes_box` of the codes and `scales_box` of the
// scales holds exactly the scales of its codes (every boundary of codes_box on a block boundary
// or the tensor's end, and scales_box the blocks it covers); else why not, naming the nearest
// split that works.
std::string KeptSplitProblem(const QuantizedValue& v, const TensorBox& codes_box,
                             const TensorBox& scales_box);

// Keeping a value quantized in a module that declares its granularity (torchao's Float8Tensor
// `block_size`: grid elements per scale, per dimension, as `scale_block` says it): "" when it is
// the checkpoint's, with no partial block (such a module takes a block as a dimension / its
// scale count); else why not, naming both.
// REQUIRES: `module_block` has one positive entry per grid dimension (validated at the edge).
std::string KeptGranularityProblem(const QuantizedValue& v, const std::vector<int64_t>& module_block);

}  // namespace metaload

#endif  // METALOAD_PLANNER_PLAN_QUANT_BOXES_H_
