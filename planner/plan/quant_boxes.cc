#include "planner/plan/quant_boxes.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace metaload {
namespace {

int64_t FloorDiv(int64_t a, int64_t b) { return a / b; }
int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool Empty(const TensorBox& box) {
  for (int64_t l : box.length) {
    if (l == 0) return true;
  }
  return false;
}

// The blocks of `block` elements per grid dimension that cover `grid_box`; along the last
// dimension all of them when `whole_last`.
TensorBox Blocks(const TensorBox& grid_box, const std::vector<int64_t>& block,
                 const std::vector<int64_t>& grid_shape, bool whole_last) {
  TensorBox out;
  for (size_t d = 0; d < block.size(); ++d) {
    const bool whole = whole_last && d + 1 == block.size();
    const int64_t from = whole ? 0 : grid_box.start[d];
    const int64_t to = whole ? grid_shape[d] : grid_box.start[d] + grid_box.length[d];
    out.start.push_back(FloorDiv(from, block[d]));
    out.length.push_back(CeilDiv(to, block[d]) - FloorDiv(from, block[d]));
  }
  return out;
}

// Blocks of a grid as a box of a stored tensor: the same box, a trailing whole dimension for
// MXFP4's 16 bytes a group, or the one element of a per-tensor scale ([] or [1]).
TensorBox StoredBox(const TensorBox& blocks, const TensorLayout& stored) {
  if (stored.shape.size() == blocks.start.size()) return blocks;
  if (stored.shape.size() == blocks.start.size() + 1) {
    TensorBox out = blocks;
    out.start.push_back(0);
    out.length.push_back(stored.shape.back());
    return out;
  }
  return TensorBox{std::vector<int64_t>(stored.shape.size(), 0), stored.shape};  // one scale for all
}

// "per row ([1, 256])", "per tensor ([512, 256])", "per 128x128 block": a granularity for people.
std::string GranularityText(const std::vector<int64_t>& block, const std::vector<int64_t>& grid) {
  const std::string elements = absl::StrCat("[", absl::StrJoin(block, ", "), "]");
  if (block == grid) return absl::StrCat("per tensor (", elements, ")");
  if (block.size() == 2 && block[0] == 1 && block[1] == grid[1])
    return absl::StrCat("per row (", elements, ")");
  return absl::StrCat("per ", absl::StrJoin(block, "x"), " block");
}

}  // namespace

TensorBox GridBox(const QuantizedValue& v, const TensorBox& value_box) {
  TensorBox grid{std::vector<int64_t>(v.grid_dim.size()), std::vector<int64_t>(v.grid_dim.size())};
  for (size_t d = 0; d < v.grid_dim.size(); ++d) {
    grid.start[v.grid_dim[d]] = value_box.start[d];
    grid.length[v.grid_dim[d]] = value_box.length[d];
  }
  return grid;
}

std::optional<TensorBox> CodeBox(const QuantizedValue& v, const TensorBox& value_box) {
  if (Empty(value_box)) return std::nullopt;
  std::vector<int64_t> block(v.grid_shape.size(), 1);
  if (v.scheme == QuantScheme::kMxfp4) block.back() = v.scale_block.back();  // a group's bytes whole
  return StoredBox(Blocks(GridBox(v, value_box), block, v.grid_shape, false), v.codes);
}

std::optional<TensorBox> ScaleBox(const QuantizedValue& v, const TensorBox& value_box) {
  if (Empty(value_box)) return std::nullopt;
  if (v.scheme != QuantScheme::kMxfp4)
    return TensorBox{std::vector<int64_t>(v.scales.shape.size(), 0), v.scales.shape};
  return StoredBox(Blocks(GridBox(v, value_box), v.scale_block, v.grid_shape, true), v.scales);
}

std::string CutGroupProblem(const QuantizedValue& v, const TensorBox& value_box) {
  if (v.scheme != QuantScheme::kMxfp4 || Empty(value_box)) return "";
  const TensorBox grid = GridBox(v, value_box);
  const size_t last = grid.start.size() - 1;
  const int64_t group = v.scale_block[last], from = grid.start[last], to = from + grid.length[last];
  if (from % group == 0 && (to % group == 0 || to == v.grid_shape[last])) return "";
  size_t value_dim = 0;
  while (value_dim < v.grid_dim.size() && v.grid_dim[value_dim] != static_cast<int>(last)) ++value_dim;
  return absl::StrCat(
      "this rank's part [", from, ", ", to, ") of dimension ", value_dim,
      " cuts through MXFP4's 32-value groups (one scale each), which two ranks would then both read "
      "and no digest sum can check: split that dimension on multiples of 32 (",
      v.grid_shape[last] / group, " groups)");
}

std::string KeptSplitProblem(const QuantizedValue& v, const TensorBox& codes_box,
                             const TensorBox& scales_box) {
  // Codes kept as stored are the grid (FP8) or its packed bytes (MXFP4): a codes box in the
  // grid's dimensions, with MXFP4's groups and bytes as two.
  TensorBox grid = codes_box;
  if (v.scheme == QuantScheme::kMxfp4 && grid.start.size() == 4) {
    grid.start = {codes_box.start[0], codes_box.start[1], codes_box.start[2] * v.scale_block.back()};
    grid.length = {codes_box.length[0], codes_box.length[1], codes_box.length[2] * v.scale_block.back()};
    if (codes_box.start[3] != 0 || codes_box.length[3] != v.codes.shape[3]) {
      return absl::StrCat(v.codes.name,
                          ": a split through the 16 bytes of an MXFP4 group cuts its 32 values apart");
    }
  }
  for (size_t d = 0; d < grid.start.size(); ++d) {
    const int64_t b = v.scale_block[d], extent = v.grid_shape[d];
    const int64_t from = grid.start[d], to = from + grid.length[d];
    if (grid.length[d] == 0 || b == 1) continue;
    if (from % b != 0 || (to % b != 0 && to != extent)) {
      const int64_t blocks = CeilDiv(extent, b);
      return absl::StrCat(v.codes.name, ": this rank's part [", from, ", ", to, ") of dimension ", d,
                          " cuts through its ", b,
                          "-element scale blocks, so it cannot hold exactly the scales of its codes; split "
                          "that dimension on block "
                          "boundaries (",
                          blocks, " blocks of ", b, ": e.g. ", blocks,
                          " or a divisor of it ranks, each holding whole blocks) or "
                          "dequantize on load (dequantize=True)");
    }
  }
  // Kept, the scales are the blocks of its codes on every dimension (a module's scale shard).
  const TensorBox expected = StoredBox(Blocks(grid, v.scale_block, v.grid_shape, false), v.scales);
  if (!Empty(grid) && (expected.start != scales_box.start || expected.length != scales_box.length)) {
    return absl::StrCat(v.scales.name, ": this rank holds scale blocks starting at [",
                        absl::StrJoin(scales_box.start, ", "), "] of length [",
                        absl::StrJoin(scales_box.length, ", "), "], but its codes of ", v.codes.name,
                        " need those starting at [", absl::StrJoin(expected.start, ", "), "] of length [",
                        absl::StrJoin(expected.length, ", "),
                        "]: shard the scales as their weight is sharded, block for block");
  }
  return "";
}

std::string KeptGranularityProblem(const QuantizedValue& v, const std::vector<int64_t>& module_block) {
  if (module_block == v.scale_block) {
    // A module that declares its block holds whole blocks only: torchao's Float8Tensor takes a
    // block as the dimension / its scale count, so a partial last block would scale the rows
    // before it wrongly (160 rows in 2 scale rows: blocks of 80).
    for (size_t d = 0; d < module_block.size(); ++d) {
      if (v.grid_shape[d] % module_block[d] == 0) continue;
      return absl::StrCat(
          v.codes.name, ": its dimension ", d, " (", v.grid_shape[d], ") ends in a partial ", module_block[d],
          "-element scale block, which a module declaring its block size cannot hold (torchao's "
          "Float8Tensor takes a block as the dimension / its scale count: ",
          v.grid_shape[d] / CeilDiv(v.grid_shape[d], module_block[d]),
          " here): dequantize on load (dequantize=True)");
    }
    return "";
  }
  const std::string theirs = GranularityText(v.scale_block, v.grid_shape);
  return absl::StrCat(v.codes.name, ": the module keeps these codes with one scale ",
                      GranularityText(module_block, v.grid_shape), ", but the checkpoint stores one ", theirs,
                      " (", v.Rule(), "): build the module with the checkpoint's granularity (one scale ",
                      theirs, ") or dequantize on load (dequantize=True)");
}

std::vector<int64_t> GridToValue(const QuantizedValue& v, const std::vector<int64_t>& grid) {
  std::vector<int64_t> value(grid.size());
  for (size_t d = 0; d < v.grid_dim.size(); ++d) value[d] = grid[v.grid_dim[d]];
  return value;
}

}  // namespace metaload
