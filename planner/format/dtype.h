// Element types as safetensors names them ("F32", "BF16", ...), with their sizes.
// The planner works on these plain codes; daemon/ and client/ map them to LibTorch.
#ifndef METALOAD_PLANNER_FORMAT_DTYPE_H_
#define METALOAD_PLANNER_FORMAT_DTYPE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace metaload {

enum class DType : uint8_t {
  kBool,
  kU8,
  kI8,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
  kF8E5M2,
  kF8E4M3,
};

// "F32" -> kF32. InvalidArgument naming the code and the known ones otherwise.
absl::StatusOr<DType> DTypeFromCode(absl::string_view code);
// Also accepts torch / Hugging Face spellings: "float32", "bfloat16", "torch.float16", "fp16", "bf16".
absl::StatusOr<DType> DTypeFromAnyName(absl::string_view name);
// kF32 -> "F32" (the safetensors code).
absl::string_view DTypeCode(DType dtype);
int64_t DTypeSizeBytes(DType dtype);
// F16, BF16, F32, F64: the types `--dtype` converts between. FP8 and integers are stored
// encodings (quantized weights, indexes) that a load must not reinterpret.
bool IsConvertibleFloat(DType dtype);

}  // namespace metaload

#endif  // METALOAD_PLANNER_FORMAT_DTYPE_H_
