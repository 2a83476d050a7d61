// Reading the safetensors format (https://github.com/huggingface/safetensors):
//
//   [u64 little-endian N][N bytes of UTF-8 JSON header][data]
//
// The header maps each tensor name to {"dtype","shape","data_offsets":[begin,end]}
// (offsets relative to the start of data) and may hold "__metadata__" (string -> string).
// Files are untrusted: ParseSafetensorsHeader validates in the format library's order,
// with one distinct error message per failure (each has a test):
//   1. the 8-byte length prefix is present            ("file is shorter than 8 bytes")
//   2. N <= kMaxHeaderBytes                           ("the header length field exceeds the ...")
//   3. 8 + N <= file size                             ("... field exceeds the file size")
//   4. header is valid UTF-8 JSON object              ("header is not valid JSON")
//   5. each entry has a known dtype, a shape of non-negative ints, two offsets
//   6. element count * dtype size == end - begin, with checked arithmetic
//   7. offsets, sorted, are contiguous from 0 and end exactly at the end of the file
//      ("data is not contiguous", "data does not cover the file")
// Every error is InvalidArgument (or DataLoss for a truncated file) and starts with the path.
// No error shows the file's bytes: not the length field's value, not the JSON text (JSON values
// are described by kind, util/json/strict_json.h), only tensor and key names of a header that
// parsed: the file may be a secret put where a checkpoint was expected (issue 23).
#ifndef METALOAD_PLANNER_FORMAT_SAFETENSORS_H_
#define METALOAD_PLANNER_FORMAT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/format/tensor_layout.h"
#include "util/fs/file_stamp.h"
#include "util/fs/storage.h"

namespace metaload {

// 100 MB, the limit the safetensors library itself enforces.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct SafetensorsFile {
  // Tensors in the order of their data offsets. `file` is set to the name passed in;
  // begin/end offsets are absolute in the file (8 + N + relative offset).
  std::vector<TensorLayout> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__", may be empty
  uint64_t data_begin_offset = 0;               // 8 + N
  uint64_t file_size_bytes = 0;
  // ReadSafetensorsFile: the file as fstat saw it on the descriptor the header was read from,
  // the same before and after the read, so the layout above is the layout of the file with
  // this stamp (what registration records; util/fs/file_stamp.h). Zero from
  // ParseSafetensorsHeader.
  FileStamp stamp;
};

// Parses a header given the first bytes of a file. `prefix` must hold at least the first
// 8 + N bytes when the file has them (fewer means truncated). `file_size_bytes` is the
// file's total size; `file_name` is stored in each TensorLayout::file and used in errors.
absl::StatusOr<SafetensorsFile> ParseSafetensorsHeader(absl::string_view prefix, uint64_t file_size_bytes,
                                                       absl::string_view file_name);

// Reads only the header of the file at `path` (never the data), through `storage` (a daemon's
// keeps to its roots: util/fs/storage.h), whose errors are returned as they are. `file_name` as
// above. Unavailable, busy ("changed while its header was read; try again") when the file
// changed while it was read (RandomAccessFile::Unchanged).
absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(const std::string& path, absl::string_view file_name,
                                                    const Storage& storage = {});

}  // namespace metaload

#endif  // METALOAD_PLANNER_FORMAT_SAFETENSORS_H_
