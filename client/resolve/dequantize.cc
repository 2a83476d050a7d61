#include "client/resolve/dequantize.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/resolve/fp8_cpu_kernel.h"
#include "libtorch/torch_glue.h"
#include "planner/plan/quant_boxes.h"

namespace metaload {
namespace {

// Elements of one float32 temporary: a slab of rows dequantized in place, then copied out.
constexpr int64_t kSlabElements = int64_t{1} << 21;

// The 16 FP4 E2M1 values (OCP MX v1.0, 5.3.3): sign, 2 exponent bits (bias 1), 1 mantissa bit.
at::Tensor Fp4Values() {
  static const float kValues[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  return torch::from_blob(const_cast<float*>(kValues), {16}, torch::kFloat32).clone();
}

// The 256 E8M0 scales as float32, bit for bit: 2^(s - 127) for s < 255 (s = 0 is the subnormal
// 2^-127), NaN for 255 (OCP MX v1.0, 5.4.1).
at::Tensor E8m0Values() {
  std::vector<uint32_t> bits(256);
  for (uint32_t s = 1; s < 255; ++s) bits[s] = s << 23;
  bits[0] = 0x00400000u;
  bits[255] = 0x7fc00000u;
  at::Tensor out = torch::empty({256}, torch::kFloat32);
  std::memcpy(out.data_ptr(), bits.data(), bits.size() * sizeof(uint32_t));
  return out;
}

std::string Shape(at::IntArrayRef shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

absl::Status ShapeIs(const char* what, const at::Tensor& t, const std::vector<int64_t>& want) {
  if (t.sizes().vec() == want) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("dequantizing: its ", what, " hold ", Shape(t.sizes()), ", the box needs ", Shape(want)));
}

// The grid elements' codes as a fresh float32 tensor, rows [row, row + rows) of the grid box.
// `fp4`: Fp4Values() on the device (MXFP4 only).
at::Tensor CodeValues(const QuantizedValue& v, const TensorBox& grid, const TensorBox& code_box,
                      const at::Tensor& codes, int64_t row, int64_t rows, const at::Tensor& fp4) {
  at::Tensor slab = codes.narrow(0, row, rows).to(fp4.device());
  if (v.scheme != QuantScheme::kMxfp4) return slab.to(torch::kFloat32);
  const at::Tensor& lut = fp4;
  const at::Tensor bytes = slab.to(torch::kInt64);
  // Low nibble first: value 2k of a group is byte k's low four bits, value 2k + 1 its high four.
  at::Tensor values = torch::stack(
      {lut.index({torch::bitwise_and(bytes, 15)}), lut.index({torch::bitwise_right_shift(bytes, 4)})}, -1);
  values = values.reshape({rows, slab.size(1), slab.size(2) * v.scale_block.back()});
  const int64_t first = grid.start[2] - code_box.start[2] * v.scale_block.back();
  return values.narrow(2, first, grid.length[2]).contiguous();
}

// Multiplies `values` (rows [row, row + rows) of the grid box, float32) by each element's scale
// in place. The scales broadcast: a slab never crosses a block of the first dimension, a
// dimension whose block is one element takes its scales' slice, one scale along a dimension is
// broadcast, and whole blocks of the last dimension multiply as [..., blocks, block] by
// [..., blocks, 1]; only a last dimension cut through a block expands its (one row of) scales.
void Scale(const QuantizedValue& v, const TensorBox& grid, const TensorBox& scale_box,
           const at::Tensor& scales, int64_t row, int64_t rows, at::Tensor& values) {
  if (v.scheme == QuantScheme::kFp8Tensor) {
    values.mul_(scales.reshape({}));
    return;
  }
  const size_t last = v.grid_shape.size() - 1;
  const int64_t b0 = v.scale_block[0];
  at::Tensor s = scales.narrow(0, (grid.start[0] + row) / b0 - scale_box.start[0], b0 == 1 ? rows : 1);
  bool grouped = false;
  for (size_t d = 1; d <= last; ++d) {
    const int64_t b = v.scale_block[d], from = grid.start[d], length = grid.length[d];
    const int64_t dim = static_cast<int64_t>(d);
    if (b == 1) {
      s = s.narrow(dim, from - scale_box.start[d], length);
    } else if (s.size(dim) == 1) {
      continue;  // one scale along it: broadcast
    } else if (d == last && from % b == 0 && length % b == 0) {
      s = s.narrow(dim, from / b - scale_box.start[d], length / b).unsqueeze(-1);
      grouped = true;
    } else {
      const at::Tensor index =
          torch::div(torch::arange(from, from + length, torch::dtype(torch::kInt64).device(s.device())), b,
                     "floor") -
          scale_box.start[d];
      s = s.index_select(dim, index);
    }
  }
  if (!grouped) {
    values.mul_(s);
    return;
  }
  std::vector<int64_t> blocks = values.sizes().vec();
  blocks.back() /= v.scale_block[last];
  blocks.push_back(v.scale_block[last]);
  values.view(blocks).mul_(s);
}

}  // namespace

absl::Status DequantizeInto(const QuantizedValue& v, const TensorBox& box, const at::Tensor& codes,
                            const at::Tensor& scales, at::Tensor& dest) {
  const std::optional<TensorBox> code_box = CodeBox(v, box), scale_box = ScaleBox(v, box);
  if (!code_box.has_value()) return absl::OkStatus();  // an empty box: nothing to compute
  const TensorBox grid = GridBox(v, box);
  if (absl::Status s = ShapeIs("codes", codes, code_box->length); !s.ok()) return s;
  if (absl::Status s = ShapeIs("scales", scales, scale_box->length); !s.ok()) return s;
  if (absl::Status s = ShapeIs("destination", dest, box.length); !s.ok()) return s;
  const int64_t rows = grid.length[0];
  const int64_t per_row = std::max<int64_t>(1, NumElements(grid.length) / std::max<int64_t>(1, rows));
  const int64_t slab_rows = std::max<int64_t>(1, kSlabElements / per_row);
  const int64_t b0 = v.scheme == QuantScheme::kFp8Tensor ? 1 : v.scale_block[0];
  std::vector<int64_t> to_value(v.grid_dim.begin(), v.grid_dim.end());  // value dim d is grid dim grid_dim[d]
  return CallTorch(absl::StrCat("dequantizing ", v.name), [&] {
    // The scales as float32 on the destination's device, once (MXFP4's E8M0 by table: exact).
    const at::Tensor device_scales = scales.to(dest.device());
    const at::Tensor s = v.scheme == QuantScheme::kMxfp4
                             ? E8m0Values().to(dest.device()).index({device_scales.to(torch::kInt64)})
                             : device_scales.to(torch::kFloat32).contiguous();
    if (DequantizeFp8OnCpu(v, box, *scale_box, codes, s, dest)) return;
    // The FP4 table once a value, not once a slab.
    const at::Tensor fp4 = v.scheme == QuantScheme::kMxfp4
                               ? Fp4Values().to(dest.device())
                               : torch::empty({0}, torch::dtype(torch::kFloat32).device(dest.device()));
    for (int64_t row = 0; row < rows;) {
      // Within one block of the first dimension, so that its scales are one row.
      const int64_t in_block = b0 - (grid.start[0] + row) % b0;
      const int64_t n = std::min({slab_rows, rows - row, b0 == 1 ? rows - row : in_block});
      at::Tensor values = CodeValues(v, grid, *code_box, codes, row, n, fp4);
      Scale(v, grid, *scale_box, s, row, n, values);
      // Grid dimension 0 is value dimension 0 for every scheme (MXFP4 swaps the last two); the
      // copy rounds float32 to the destination's dtype, to nearest even.
      dest.narrow(0, row, n).copy_(values.permute(to_value));
      row += n;
    }
  });
}

}  // namespace metaload
