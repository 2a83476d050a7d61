#include "planner/format/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "planner/format/dtype.h"
#include "util/error_kind.h"
#include "util/fs/storage.h"
#include "util/json/strict_json.h"
#include "util/status_macros.h"
#include "util/units.h"
#include "util/utf8.h"

namespace metaload {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kLengthPrefixBytes = 8;

// Prefixes every message with the file's name, so an error read in a log of a 100-shard load
// says which shard it is about.
class ErrorSink {
 public:
  explicit ErrorSink(absl::string_view file_name) : file_name_(file_name) {}
  absl::Status Invalid(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(file_name_, ": ", message));
  }
  absl::Status DataLoss(absl::string_view message) const {
    // A header that contradicts itself is the user's file to fix (exit 2), not bytes lost on
    // their way: the code says what broke, the kind says who fixes it.
    return WithErrorKind(absl::DataLossError(absl::StrCat(file_name_, ": ", message)), ErrorKind::kBadInput);
  }

 private:
  absl::string_view file_name_;
};

// The u64 little-endian length prefix. REQUIRES: prefix.size() >= 8.
uint64_t DecodeHeaderSize(absl::string_view prefix) {
  uint64_t header_size_bytes = 0;
  for (int i = 7; i >= 0; --i) {
    header_size_bytes = (header_size_bytes << 8) | static_cast<unsigned char>(prefix[i]);
  }
  return header_size_bytes;
}

absl::StatusOr<std::map<std::string, std::string>> ParseMetadata(const Json& value, const ErrorSink& errors) {
  if (!value.is_object()) {
    return errors.Invalid(absl::StrCat("__metadata__ must be an object of strings, got ", value.type_name()));
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      return errors.Invalid(
          absl::StrCat("__metadata__ value for \"", key, "\" must be a string, got ", item.type_name()));
    }
    metadata[key] = item.get<std::string>();
  }
  return metadata;
}

// One header entry: dtype, shape and offsets (relative to the data region), checked for types
// and for element count * dtype size == end - begin. Unknown extra fields are ignored, as the
// safetensors library ignores them.
absl::StatusOr<TensorLayout> ParseTensorEntry(const std::string& name, const Json& entry,
                                              const ErrorSink& errors) {
  auto bad = [&](absl::string_view what) {
    return errors.Invalid(absl::StrCat("tensor \"", name, "\": ", what));
  };
  if (!entry.is_object()) return bad(absl::StrCat("entry must be an object, got ", entry.type_name()));
  TensorLayout layout;
  layout.name = name;

  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end()) return bad("missing \"dtype\"");
  if (!dtype_it->is_string()) {
    return bad(absl::StrCat("\"dtype\" must be a string, got ", dtype_it->type_name()));
  }
  auto dtype = DTypeFromCode(dtype_it->get<std::string>());
  if (!dtype.ok()) return bad(dtype.status().message());
  layout.dtype = *dtype;

  auto shape_it = entry.find("shape");
  if (shape_it == entry.end()) return bad("missing \"shape\"");
  if (!shape_it->is_array()) {
    return bad(absl::StrCat("\"shape\" must be an array, got ", shape_it->type_name()));
  }
  for (const Json& dim : *shape_it) {
    // is_number_unsigned excludes negative integers and every float, so "2.0" and "-1" fail.
    if (!dim.is_number_unsigned() ||
        dim.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return bad(absl::StrCat("\"shape\" must hold non-negative integers, got ", JsonForMessage(dim)));
    }
    layout.shape.push_back(dim.get<int64_t>());
  }
  uint64_t element_count = 1;
  for (int64_t dim : layout.shape) {
    if (MulOverflows(element_count, static_cast<uint64_t>(dim), &element_count)) {
      return bad(absl::StrCat("element count of shape ", ShapeToString(layout.shape), " overflows 64 bits"));
    }
  }

  auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end()) return bad("missing \"data_offsets\"");
  if (!offsets_it->is_array() || offsets_it->size() != 2 || !(*offsets_it)[0].is_number_unsigned() ||
      !(*offsets_it)[1].is_number_unsigned()) {
    return bad(absl::StrCat("\"data_offsets\" must be two non-negative integers, got ",
                            JsonForMessage(*offsets_it)));
  }
  layout.begin_offset = (*offsets_it)[0].get<uint64_t>();
  layout.end_offset = (*offsets_it)[1].get<uint64_t>();
  if (layout.end_offset < layout.begin_offset) {
    return bad(
        absl::StrCat("\"data_offsets\" end ", layout.end_offset, " is before begin ", layout.begin_offset));
  }

  uint64_t expected_size_bytes = 0;
  if (MulOverflows(element_count, static_cast<uint64_t>(DTypeSizeBytes(layout.dtype)),
                   &expected_size_bytes)) {
    return bad(absl::StrCat("byte size of shape ", ShapeToString(layout.shape), " overflows 64 bits"));
  }
  if (expected_size_bytes != layout.size_bytes()) {
    return bad(absl::StrCat("size mismatch: shape ", ShapeToString(layout.shape), " of ",
                            DTypeCode(layout.dtype), " needs ", expected_size_bytes,
                            " bytes but data_offsets span ", layout.size_bytes()));
  }
  return layout;
}

// Step 7: with tensors sorted by offset, each begins where the previous ended, the first at
// 0, and the last ends exactly at the end of the data region.
absl::Status CheckContiguousCoverage(const std::vector<TensorLayout>& sorted, uint64_t data_size_bytes,
                                     const ErrorSink& errors) {
  uint64_t expected_begin = 0;
  const TensorLayout* previous = nullptr;
  for (const TensorLayout& t : sorted) {
    if (t.begin_offset != expected_begin) {
      if (previous == nullptr) {
        return errors.Invalid(absl::StrCat("data is not contiguous: first tensor \"", t.name, "\" begins at ",
                                           t.begin_offset, ", not 0"));
      }
      return errors.Invalid(absl::StrCat("data is not contiguous: tensor \"", t.name, "\" begins at ",
                                         t.begin_offset, " but \"", previous->name, "\" ends at ",
                                         expected_begin,
                                         t.begin_offset > expected_begin ? " (gap)" : " (overlap)"));
    }
    expected_begin = t.end_offset;
    previous = &t;
  }
  if (expected_begin > data_size_bytes) {
    return errors.Invalid(absl::StrCat("data does not cover the file: tensor \"", previous->name,
                                       "\" ends at data offset ", expected_begin, ", past the ",
                                       data_size_bytes, "-byte data region"));
  }
  if (expected_begin < data_size_bytes) {
    return errors.Invalid(absl::StrCat("data does not cover the file: ", data_size_bytes - expected_begin,
                                       " extra trailing bytes after the last tensor (data region is ",
                                       data_size_bytes, " bytes, tensors end at ", expected_begin, ")"));
  }
  return absl::OkStatus();
}

// `error_name` starts every message; `layout_file_name` goes into TensorLayout::file. They
// differ when ReadSafetensorsFile knows the full path but the caller wants a relative name.
absl::StatusOr<SafetensorsFile> ParseHeader(absl::string_view prefix, uint64_t file_size_bytes,
                                            absl::string_view layout_file_name,
                                            absl::string_view error_name) {
  const ErrorSink errors(error_name);
  // 1. Length prefix.
  if (file_size_bytes < kLengthPrefixBytes) {
    return errors.Invalid(
        absl::StrCat("file is shorter than 8 bytes (", file_size_bytes, " bytes): not a safetensors file"));
  }
  if (prefix.size() < kLengthPrefixBytes) {
    return errors.DataLoss(absl::StrCat("truncated: only ", prefix.size(), " of the ", file_size_bytes,
                                        " bytes could be read, fewer than the 8-byte length prefix"));
  }
  // The length field's value is never put in a message: a file that is not a safetensors file
  // (a secret put where one was expected) would have its first 8 bytes shown as a number.
  const uint64_t header_size_bytes = DecodeHeaderSize(prefix);
  // 2. Size cap, before anything is allocated for the header.
  if (header_size_bytes > kMaxSafetensorsHeaderBytes) {
    return errors.Invalid(absl::StrCat("the header length field exceeds the ", kMaxSafetensorsHeaderBytes,
                                       "-byte limit: not a safetensors file"));
  }
  // 3. Bounds. N <= 1e8 here, so 8 + N cannot overflow.
  const uint64_t data_begin_offset = kLengthPrefixBytes + header_size_bytes;
  if (data_begin_offset > file_size_bytes) {
    return errors.Invalid(absl::StrCat("the header length field exceeds the file size (", file_size_bytes,
                                       " bytes): truncated, or not a safetensors file"));
  }
  if (prefix.size() < data_begin_offset) {
    return errors.DataLoss(absl::StrCat("truncated: the header needs more than the ", prefix.size(),
                                        " bytes that could be read"));
  }
  // 4. UTF-8, JSON, an object.
  const absl::string_view header_text = prefix.substr(kLengthPrefixBytes, header_size_bytes);
  // nlohmann checks UTF-8 only inside strings and reports it as a JSON syntax error; checking
  // the whole header first gives the encoding problem its own message, as safetensors does.
  if (!IsValidUtf8(header_text)) return errors.Invalid("header is not valid UTF-8");
  absl::StatusOr<Json> parsed = ParseJsonRejectingDuplicateKeys(header_text);
  if (!parsed.ok()) {
    return errors.Invalid(absl::StrCat("header is not valid JSON: ", parsed.status().message()));
  }
  const Json& header = *parsed;
  if (!header.is_object()) {
    return errors.Invalid(absl::StrCat("header is not a JSON object (got ", header.type_name(), ")"));
  }

  SafetensorsFile file;
  file.data_begin_offset = data_begin_offset;
  file.file_size_bytes = file_size_bytes;
  // 5 and 6, entry by entry.
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      ML_ASSIGN_OR_RETURN(file.metadata, ParseMetadata(value, errors));
      continue;
    }
    ML_ASSIGN_OR_RETURN(TensorLayout layout, ParseTensorEntry(key, value, errors));
    file.tensors.push_back(std::move(layout));
  }
  // 7. Several zero-sized tensors may share an offset; ties break by end, then name, so the
  // order (and thus every plan built on it) is deterministic.
  std::sort(file.tensors.begin(), file.tensors.end(), [](const TensorLayout& a, const TensorLayout& b) {
    return std::tie(a.begin_offset, a.end_offset, a.name) < std::tie(b.begin_offset, b.end_offset, b.name);
  });
  ML_RETURN_IF_ERROR(CheckContiguousCoverage(file.tensors, file_size_bytes - data_begin_offset, errors));
  // Offsets fit: each end <= data size, and data_begin_offset + data size == file size.
  for (TensorLayout& t : file.tensors) {
    t.file = std::string(layout_file_name);
    t.begin_offset += data_begin_offset;
    t.end_offset += data_begin_offset;
  }
  return file;
}

}  // namespace

absl::StatusOr<SafetensorsFile> ParseSafetensorsHeader(absl::string_view prefix, uint64_t file_size_bytes,
                                                       absl::string_view file_name) {
  return ParseHeader(prefix, file_size_bytes, file_name, file_name);
}

absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(const std::string& path, absl::string_view file_name,
                                                    const Storage& storage) {
  // Through the location's back end (POSIX: a ReadOnlyFile, opened without read-ahead, which
  // would fetch the rows after the header, other ranks' shards on a cluster).
  ML_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, storage.Open(path));
  const uint64_t file_size_bytes = file->size_bytes();
  std::string prefix(std::min(file_size_bytes, kLengthPrefixBytes), '\0');
  auto read = [&](uint64_t offset, size_t size) {
    return file->ReadAt(offset, absl::MakeSpan(reinterpret_cast<uint8_t*>(prefix.data()) + offset, size));
  };
  absl::Status status = read(0, prefix.size());
  if (status.ok() && prefix.size() == kLengthPrefixBytes) {
    const uint64_t header_size_bytes = DecodeHeaderSize(prefix);
    // Read the header only when it is plausible; otherwise the parser reports why it is not.
    if (header_size_bytes <= kMaxSafetensorsHeaderBytes &&
        header_size_bytes <= file_size_bytes - kLengthPrefixBytes) {
      prefix.resize(kLengthPrefixBytes + header_size_bytes);
      status = read(kLengthPrefixBytes, header_size_bytes);
    }
  }
  // A write to the file (or its replacement, for a path reopened later) changes its version:
  // then the header read may mix two versions (or end early), and the stamp names neither.
  ML_ASSIGN_OR_RETURN(const bool unchanged, file->Unchanged());
  if (!unchanged) return TryAgainError(absl::StrCat(path, ": changed while its header was read; try again"));
  ML_RETURN_IF_ERROR(status);
  ML_ASSIGN_OR_RETURN(SafetensorsFile parsed, ParseHeader(prefix, file_size_bytes, file_name, path));
  parsed.stamp = StampOf(*file);
  return parsed;
}

}  // namespace metaload
