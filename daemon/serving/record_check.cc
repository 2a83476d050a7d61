#include "daemon/serving/record_check.h"

#include <algorithm>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "planner/format/safetensors.h"
#include "util/identifiers.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

constexpr uint64_t kLengthPrefixBytes = 8;

// The file's first 8 + N bytes, or fewer when the length field is implausible (the parser then
// says why): never more than kMaxSafetensorsHeaderBytes however the record or file lies.
absl::StatusOr<std::string> ReadHeaderBytes(const RandomAccessFile& file) {
  const uint64_t size = file.size_bytes();
  std::string prefix(std::min(size, kLengthPrefixBytes), '\0');
  ML_RETURN_IF_ERROR(
      file.ReadAt(0, absl::MakeSpan(reinterpret_cast<uint8_t*>(prefix.data()), prefix.size())));
  if (prefix.size() < kLengthPrefixBytes) return prefix;
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | static_cast<uint8_t>(prefix[i]);
  if (header_bytes > kMaxSafetensorsHeaderBytes || header_bytes > size - kLengthPrefixBytes) return prefix;
  prefix.resize(kLengthPrefixBytes + header_bytes);
  ML_RETURN_IF_ERROR(file.ReadAt(
      kLengthPrefixBytes,
      absl::MakeSpan(reinterpret_cast<uint8_t*>(prefix.data()) + kLengthPrefixBytes, header_bytes)));
  return prefix;
}

// What differs between a claimed tensor and the header's; empty when nothing does.
std::string Difference(const TensorLayout& claimed, const TensorLayout& held) {
  if (claimed.dtype != held.dtype) {
    return absl::StrCat("dtype ", DTypeCode(claimed.dtype), ", the file's header says ",
                        DTypeCode(held.dtype));
  }
  if (claimed.shape != held.shape) {
    return absl::StrCat("shape ", ShapeToString(claimed.shape), ", the file's header says ",
                        ShapeToString(held.shape));
  }
  if (claimed.begin_offset != held.begin_offset || claimed.end_offset != held.end_offset) {
    return absl::StrCat("bytes [", claimed.begin_offset, ", ", claimed.end_offset,
                        "), the file's header says [", held.begin_offset, ", ", held.end_offset, ")");
  }
  return "";
}

}  // namespace

absl::Status RecordRefusal(const std::string& path, const std::string& model) {
  return absl::PermissionDeniedError(absl::StrCat("ReadRange: ", QuoteForMessage(path, 512),
                                                  " does not hold what the record of model ",
                                                  QuoteForMessage(model), " says"));
}

absl::Status CheckFileHoldsClaims(const RandomAccessFile& file, const std::string& model,
                                  const std::vector<const TensorLayout*>& claimed) {
  const std::string& path = file.path();
  const auto refused = [&](absl::string_view why) {
    return absl::PermissionDeniedError(absl::StrCat(RecordRefusal(path, model).message(), ": ", why));
  };
  ML_ASSIGN_OR_RETURN(std::string prefix, ReadHeaderBytes(file));
  absl::StatusOr<SafetensorsFile> header = ParseSafetensorsHeader(prefix, file.size_bytes(), path);
  if (!header.ok()) {
    // The parser's reasons name the path and describe, never show, what is there.
    return refused(absl::StrCat("it is not a safetensors file (", header.status().message(), ")"));
  }
  absl::flat_hash_map<absl::string_view, const TensorLayout*> held;
  held.reserve(header->tensors.size());
  for (const TensorLayout& t : header->tensors) held.emplace(t.name, &t);
  for (const TensorLayout* t : claimed) {
    auto it = held.find(t->name);
    if (it == held.end()) {
      return refused(
          absl::StrCat("tensor ", QuoteForMessage(t->name, 256), " is not in its safetensors header"));
    }
    if (std::string differs = Difference(*t, *it->second); !differs.empty()) {
      return refused(absl::StrCat("tensor ", QuoteForMessage(t->name, 256), " has ", differs));
    }
  }
  return absl::OkStatus();
}

}  // namespace metaload
