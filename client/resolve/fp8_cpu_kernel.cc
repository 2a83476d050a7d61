#include "client/resolve/fp8_cpu_kernel.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e5m2.h>
#include <c10/util/Half.h>

#include <array>
#include <cstdint>

namespace metaload {
namespace {

using Table = std::array<float, 256>;

template <typename Fp8>
Table MakeTable() {
  Table table{};
  for (int b = 0; b < 256; ++b) table[b] = static_cast<float>(Fp8(static_cast<uint8_t>(b), Fp8::from_bits()));
  return table;
}

const Table& TableOf(DType dtype) {
  static const Table kE4m3 = MakeTable<c10::Float8_e4m3fn>();
  static const Table kE5m2 = MakeTable<c10::Float8_e5m2>();
  return dtype == DType::kF8E5M2 ? kE5m2 : kE4m3;
}

template <typename Out>
void Rows(const QuantizedValue& v, const TensorBox& box, const TensorBox& scale_box, const Table& table,
          const uint8_t* codes, const float* scales, Out* dest, int64_t dest_row_stride) {
  const int64_t rows = box.length[0], cols = box.length[1];
  const int64_t row_block = v.scheme == QuantScheme::kFp8Tensor ? 0 : v.scale_block[0];
  const int64_t col_block = v.scheme == QuantScheme::kFp8Block ? v.scale_block[1] : 0;  // 0: one scale a row
  const int64_t scale_cols = scale_box.length.size() == 2 ? scale_box.length[1] : 1;
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t row = box.start[0] + r;
      const float* scale_row =
          row_block == 0 ? scales : scales + (row / row_block - scale_box.start[0]) * scale_cols;
      const uint8_t* in = codes + r * cols;
      Out* out = dest + r * dest_row_stride;
      for (int64_t c = 0; c < cols;) {
        // A run of columns under one scale: the rest of this block, or the whole row.
        const int64_t col = box.start[1] + c;
        const int64_t run = col_block == 0 ? cols - c : std::min(cols - c, col_block - col % col_block);
        const float scale = col_block == 0 ? scale_row[0] : scale_row[col / col_block - scale_box.start[1]];
        for (int64_t i = 0; i < run; ++i) out[c + i] = static_cast<Out>(table[in[c + i]] * scale);
        c += run;
      }
    }
  });
}

}  // namespace

bool DequantizeFp8OnCpu(const QuantizedValue& v, const TensorBox& box, const TensorBox& scale_box,
                        const at::Tensor& codes, const at::Tensor& scales, at::Tensor& dest) {
  if (v.scheme == QuantScheme::kMxfp4 || box.start.size() != 2 || !dest.device().is_cpu() ||
      !codes.device().is_cpu() || !scales.device().is_cpu() || !codes.is_contiguous() ||
      !scales.is_contiguous() || scales.scalar_type() != torch::kFloat32 || dest.dim() != 2 ||
      (dest.size(1) > 1 && dest.stride(1) != 1) ||
      (codes.scalar_type() != torch::kFloat8_e4m3fn && codes.scalar_type() != torch::kFloat8_e5m2)) {
    return false;
  }
  const Table& table = TableOf(codes.scalar_type() == torch::kFloat8_e5m2 ? DType::kF8E5M2 : DType::kF8E4M3);
  const auto* in = static_cast<const uint8_t*>(codes.data_ptr());
  const float* s = scales.data_ptr<float>();
  switch (dest.scalar_type()) {
    case torch::kBFloat16:
      Rows(v, box, scale_box, table, in, s, dest.data_ptr<c10::BFloat16>(), dest.stride(0));
      return true;
    case torch::kFloat16:
      Rows(v, box, scale_box, table, in, s, dest.data_ptr<c10::Half>(), dest.stride(0));
      return true;
    case torch::kFloat32:
      Rows(v, box, scale_box, table, in, s, dest.data_ptr<float>(), dest.stride(0));
      return true;
    default:
      return false;
  }
}

}  // namespace metaload
