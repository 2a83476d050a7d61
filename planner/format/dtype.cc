#include "planner/format/dtype.h"

#include <array>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "util/identifiers.h"

namespace metaload {
namespace {

struct DTypeInfo {
  DType dtype;
  absl::string_view code;
  int64_t size_bytes;
};

constexpr std::array<DTypeInfo, 15> kDTypes = {{
    {DType::kBool, "BOOL", 1},
    {DType::kU8, "U8", 1},
    {DType::kI8, "I8", 1},
    {DType::kI16, "I16", 2},
    {DType::kU16, "U16", 2},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kI32, "I32", 4},
    {DType::kU32, "U32", 4},
    {DType::kF32, "F32", 4},
    {DType::kF64, "F64", 8},
    {DType::kI64, "I64", 8},
    {DType::kU64, "U64", 8},
    {DType::kF8E5M2, "F8_E5M2", 1},
    {DType::kF8E4M3, "F8_E4M3", 1},
}};

const DTypeInfo& Info(DType dtype) { return kDTypes[static_cast<size_t>(dtype)]; }

}  // namespace

absl::StatusOr<DType> DTypeFromCode(absl::string_view code) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.code == code) return info.dtype;
  }
  std::vector<std::string> known;
  for (const DTypeInfo& info : kDTypes) known.emplace_back(info.code);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype ", QuoteForMessage(code), " (known: ", absl::StrJoin(known, ", "), ")"));
}

absl::StatusOr<DType> DTypeFromAnyName(absl::string_view name) {
  std::string lower = absl::AsciiStrToLower(name);
  absl::string_view n = lower;
  absl::ConsumePrefix(&n, "torch.");
  struct Alias {
    absl::string_view name;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"float32", DType::kF32},
      {"float", DType::kF32},
      {"fp32", DType::kF32},
      {"float16", DType::kF16},
      {"half", DType::kF16},
      {"fp16", DType::kF16},
      {"bfloat16", DType::kBF16},
      {"bf16", DType::kBF16},
      {"float64", DType::kF64},
      {"double", DType::kF64},
      {"fp64", DType::kF64},
      {"int8", DType::kI8},
      {"uint8", DType::kU8},
      {"int16", DType::kI16},
      {"uint16", DType::kU16},
      {"int32", DType::kI32},
      {"int", DType::kI32},
      {"uint32", DType::kU32},
      {"int64", DType::kI64},
      {"long", DType::kI64},
      {"uint64", DType::kU64},
      {"bool", DType::kBool},
      {"float8_e5m2", DType::kF8E5M2},
      {"float8_e4m3fn", DType::kF8E4M3},
  };
  for (const Alias& alias : kAliases) {
    if (alias.name == n) return alias.dtype;
  }
  auto by_code = DTypeFromCode(absl::AsciiStrToUpper(name));
  if (by_code.ok()) return by_code;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype ", QuoteForMessage(name),
                   " (use a safetensors code such as F32, BF16, or a torch name such as bfloat16)"));
}

absl::string_view DTypeCode(DType dtype) { return Info(dtype).code; }
int64_t DTypeSizeBytes(DType dtype) { return Info(dtype).size_bytes; }

bool IsConvertibleFloat(DType dtype) {
  return dtype == DType::kF16 || dtype == DType::kBF16 || dtype == DType::kF32 || dtype == DType::kF64;
}

}  // namespace metaload
