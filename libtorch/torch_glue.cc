#include "libtorch/torch_glue.h"

#include "absl/strings/str_cat.h"

namespace metaload {
namespace {

struct Pair {
  DType dtype;
  c10::ScalarType type;
};
constexpr Pair kPairs[] = {
    {DType::kBool, c10::kBool},
    {DType::kU8, c10::kByte},
    {DType::kI8, c10::kChar},
    {DType::kI16, c10::kShort},
    {DType::kU16, c10::kUInt16},
    {DType::kF16, c10::kHalf},
    {DType::kBF16, c10::kBFloat16},
    {DType::kI32, c10::kInt},
    {DType::kU32, c10::kUInt32},
    {DType::kF32, c10::kFloat},
    {DType::kF64, c10::kDouble},
    {DType::kI64, c10::kLong},
    {DType::kU64, c10::kUInt64},
    {DType::kF8E5M2, c10::ScalarType::Float8_e5m2},
    {DType::kF8E4M3, c10::ScalarType::Float8_e4m3fn},
};

}  // namespace

absl::StatusOr<c10::ScalarType> ToScalarType(DType dtype) {
  for (const Pair& p : kPairs) {
    if (p.dtype == dtype) return p.type;
  }
  return absl::UnimplementedError(absl::StrCat("LibTorch has no dtype for ", DTypeCode(dtype)));
}

absl::StatusOr<DType> FromScalarType(c10::ScalarType type) {
  for (const Pair& p : kPairs) {
    if (p.type == type) return p.dtype;
  }
  return absl::UnimplementedError(absl::StrCat("no safetensors dtype for torch ", c10::toString(type)));
}

absl::Status CallTorch(absl::string_view context, const std::function<void()>& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(context, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(context, ": ", e.what()));
  }
}

}  // namespace metaload
