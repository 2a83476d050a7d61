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

// Blocks of `block` elements per grid dimension: those that cover `grid_box` (read) and those
// whose first element lies in it (proven, possibly empty).
struct GridBlocks {
  TensorBox read;
  TensorBox proven;
  bool proves_any = true;
};

GridBlocks Blocks(const TensorBox& grid_box, const std::vector<int64_t>& block) {
  GridBlocks out;
  for (size_t d = 0; d < block.size(); ++d) {
    const int64_t from = grid_box.start[d], to = from + grid_box.length[d], b = block[d];
    out.read.start.push_back(FloorDiv(from, b));
    out.read.length.push_back(CeilDiv(to, b) - FloorDiv(from, b));
    out.proven.start.push_back(CeilDiv(from, b));
    out.proven.length.push_back(CeilDiv(to, b) - CeilDiv(from, b));
    if (out.proven.length.back() == 0) out.proves_any = false;
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

SourceBoxes Sources(const QuantizedValue& v, const TensorBox& value_box, const std::vector<int64_t>& block,
                    const TensorLayout& stored) {
  SourceBoxes out;
  if (Empty(value_box)) return out;
  const GridBlocks blocks = Blocks(GridBox(v, value_box), block);
  out.read = StoredBox(blocks.read, stored);
  if (blocks.proves_any) out.proven = StoredBox(blocks.proven, stored);
  return out;
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

SourceBoxes CodeBoxes(const QuantizedValue& v, const TensorBox& value_box) {
  std::vector<int64_t> block(v.grid_shape.size(), 1);
  if (v.scheme == QuantScheme::kMxfp4) block.back() = v.scale_block.back();  // read a group's bytes whole
  return Sources(v, value_box, block, v.codes);
}

SourceBoxes ScaleBoxes(const QuantizedValue& v, const TensorBox& value_box) {
  return Sources(v, value_box, v.scale_block, v.scales);
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
  const SourceBoxes want = ScaleBoxes(v, TensorBox{GridToValue(v, grid.start), GridToValue(v, grid.length)});
  const TensorBox expected = want.read.value_or(TensorBox{});
  if (want.read.has_value() && (expected.start != scales_box.start || expected.length != scales_box.length)) {
    return absl::StrCat(v.scales.name, ": this rank holds scale blocks starting at [",
                        absl::StrJoin(scales_box.start, ", "), "] of length [",
                        absl::StrJoin(scales_box.length, ", "), "], but its codes of ", v.codes.name,
                        " need those starting at [", absl::StrJoin(expected.start, ", "), "] of length [",
                        absl::StrJoin(expected.length, ", "),
                        "]: shard the scales as their weight is sharded, block for block");
  }
  return "";
}

std::vector<int64_t> GridToValue(const QuantizedValue& v, const std::vector<int64_t>& grid) {
  std::vector<int64_t> value(grid.size());
  for (size_t d = 0; d < v.grid_dim.size(); ++d) value[d] = grid[v.grid_dim[d]];
  return value;
}

}  // namespace metaload
