#include "planner/skeleton/hf/hf_config_reader.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "planner/format/tensor_layout.h"
#include "util/json/strict_json.h"
#include "util/units.h"

namespace metaload {
namespace {

using Json = nlohmann::json;

const Json* FindIn(const Json& object, absl::string_view key) {
  auto it = object.find(std::string(key));
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::string> StringValue(const HfConfigReader& config, const Json* value,
                                        absl::string_view key, std::string fallback) {
  if (value == nullptr) return fallback;
  if (!value->is_string()) {
    return config.KeyError(key, absl::StrCat("expected a string, found ", JsonForMessage(*value)));
  }
  return value->get<std::string>();
}

}  // namespace

HfConfigReader::HfConfigReader(const Json& root, std::string source_name)
    : root_(root), source_name_(std::move(source_name)) {
  const Json* text_config = FindIn(root_, "text_config");
  if (text_config != nullptr && text_config->is_object()) text_config_ = text_config;
}

const Json* HfConfigReader::Find(std::initializer_list<absl::string_view> keys) const {
  for (absl::string_view key : keys) {
    if (text_config_ != nullptr) {
      if (const Json* value = FindIn(*text_config_, key)) return value;
    }
    if (const Json* value = FindIn(root_, key)) return value;
  }
  return nullptr;
}

const Json* HfConfigReader::FindTopLevelFirst(absl::string_view key) const {
  if (const Json* value = FindIn(root_, key)) return value;
  return text_config_ == nullptr ? nullptr : FindIn(*text_config_, key);
}

std::string HfConfigReader::QualifiedKey(absl::string_view key) const {
  if (text_config_ != nullptr && FindIn(*text_config_, key) != nullptr) {
    return absl::StrCat("text_config.", key);
  }
  return std::string(key);
}

absl::Status HfConfigReader::Error(absl::string_view what) const {
  return absl::InvalidArgumentError(absl::StrCat(source_name_, ": ", what));
}

absl::Status HfConfigReader::KeyError(absl::string_view key, absl::string_view what) const {
  return Error(absl::StrCat("\"", QualifiedKey(key), "\": ", what));
}

absl::StatusOr<int64_t> HfConfigReader::IntInRange(std::initializer_list<absl::string_view> keys,
                                                   int64_t fallback, int64_t min, int64_t max) const {
  for (absl::string_view key : keys) {
    const Json* value = Find({key});
    if (value == nullptr) continue;
    // JSON has one number type; transformers would crash on 4096.0 as a size, so we refuse it.
    if (value->is_number_unsigned() && value->get<uint64_t>() >= static_cast<uint64_t>(min) &&
        value->get<uint64_t>() <= static_cast<uint64_t>(max)) {
      return static_cast<int64_t>(value->get<uint64_t>());
    }
    if (value->is_number_integer() && !value->is_number_unsigned() && value->get<int64_t>() >= min &&
        value->get<int64_t>() <= max) {
      return value->get<int64_t>();
    }
    return KeyError(
        key, absl::StrCat("expected an integer in [", min, ", ", max, "], found ", JsonForMessage(*value)));
  }
  return fallback;
}

absl::StatusOr<int64_t> HfConfigReader::CountOr(std::initializer_list<absl::string_view> keys,
                                                int64_t fallback, int64_t max) const {
  return IntInRange(keys, fallback, 0, max);
}

absl::StatusOr<int64_t> HfConfigReader::DimOr(std::initializer_list<absl::string_view> keys,
                                              int64_t fallback) const {
  return IntInRange(keys, fallback, 1, kMaxHfDim);
}

absl::Status HfConfigReader::MissingKeyError(std::initializer_list<absl::string_view> keys) const {
  std::string aliases;
  for (absl::string_view key : keys) {
    if (key != *keys.begin()) absl::StrAppend(&aliases, aliases.empty() ? " (or " : ", ", "\"", key, "\"");
  }
  if (!aliases.empty()) aliases.append(")");
  return Error(absl::StrCat("missing key \"", *keys.begin(), "\"", aliases));
}

absl::StatusOr<int64_t> HfConfigReader::Dim(std::initializer_list<absl::string_view> keys) const {
  if (Find(keys) == nullptr) return MissingKeyError(keys);
  return DimOr(keys, 0);
}

absl::StatusOr<int64_t> HfConfigReader::Count(std::initializer_list<absl::string_view> keys,
                                              int64_t max) const {
  if (Find(keys) == nullptr) return MissingKeyError(keys);
  return CountOr(keys, 0, max);
}

absl::StatusOr<bool> HfConfigReader::BoolOr(absl::string_view key, bool fallback) const {
  const Json* value = Find({key});
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) {
    return KeyError(key, absl::StrCat("expected true or false, found ", JsonForMessage(*value)));
  }
  return value->get<bool>();
}

absl::StatusOr<std::string> HfConfigReader::StringOr(absl::string_view key, std::string fallback) const {
  return StringValue(*this, Find({key}), key, std::move(fallback));
}

absl::StatusOr<std::string> HfConfigReader::TopLevelStringOr(absl::string_view key,
                                                             std::string fallback) const {
  return StringValue(*this, FindTopLevelFirst(key), key, std::move(fallback));
}

absl::StatusOr<double> HfConfigReader::NumberOr(absl::string_view key, double fallback) const {
  const Json* value = Find({key});
  if (value == nullptr) return fallback;
  if (!value->is_number() || !std::isfinite(value->get<double>())) {
    return KeyError(key, absl::StrCat("expected a number, found ", JsonForMessage(*value)));
  }
  return value->get<double>();
}

absl::StatusOr<DType> HfConfigReader::ParamDType() const {
  // The top level first: save_pretrained writes the dtype there even for nested configs.
  for (absl::string_view key : {"dtype", "torch_dtype"}) {
    const Json* value = FindTopLevelFirst(key);
    if (value == nullptr) continue;
    if (!value->is_string()) {
      return KeyError(
          key, absl::StrCat("expected a dtype name such as \"bfloat16\", found ", JsonForMessage(*value)));
    }
    absl::StatusOr<DType> dtype = DTypeFromAnyName(value->get<std::string>());
    if (!dtype.ok()) return KeyError(key, dtype.status().message());
    return *dtype;
  }
  return DType::kF32;
}

absl::Status CheckSkeletonSize(const Skeleton& skeleton, absl::string_view source_name) {
  uint64_t total_bytes = 0;
  for (const SkeletonTensor& tensor : skeleton.tensors) {
    uint64_t size_bytes = 0;
    if (!TensorBytesFit(tensor.shape, tensor.dtype, &size_bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(source_name, ": tensor \"", tensor.name, "\" of shape ",
                                                     ShapeToString(tensor.shape), " is 2^63 bytes or more"));
    }
    if (AddOverflows(total_bytes, size_bytes, &total_bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_name, ": tensor \"", tensor.name, "\" takes the model past 2^64 bytes"));
    }
  }
  return absl::OkStatus();
}

std::string FormatRuleNumber(double value) {
  if (std::nearbyint(value) == value && std::fabs(value) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::string text = absl::StrFormat("%.*g", precision, value);
    if (std::strtod(text.c_str(), nullptr) == value) return text;
  }
  return absl::StrFormat("%.17g", value);
}

}  // namespace metaload
