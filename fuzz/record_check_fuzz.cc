// CheckFileHoldsClaims (daemon/serving/record_check.h): a forged model record's claim on a file
// against the file's own safetensors header. The input's first byte says how many tensors the
// record claims (0-7); each claim is then 1 byte of name (one of the names below), 1 of dtype, 1
// of rank (0-2), that many dims of 1 byte, and 2 offsets of 2 bytes (little-endian); the rest is
// the file. Besides crashes and UB it checks the promise ReadRange relies on: a claim accepted
// is a tensor of the header with the same dtype, shape and byte range, inside the file's data;
// a refusal is PermissionDenied.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "daemon/serving/record_check.h"
#include "planner/format/safetensors.h"
#include "util/fs/memory_file_system.h"

namespace {

// The names the seeds' files hold, and one they do not.
constexpr const char* kNames[] = {"a", "b", "w", "x", "header"};
constexpr metaload::DType kDTypes[] = {metaload::DType::kU8, metaload::DType::kF32, metaload::DType::kBF16,
                                       metaload::DType::kI64};

uint8_t Byte(const uint8_t*& data, size_t& size) {
  if (size == 0) return 0;
  --size;
  return *data++;
}

uint64_t Offset(const uint8_t*& data, size_t& size) {
  const uint64_t low = Byte(data, size);
  return low | (uint64_t{Byte(data, size)} << 8);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<metaload::TensorLayout> claims(Byte(data, size) % 8);
  for (metaload::TensorLayout& t : claims) {
    t.name = kNames[Byte(data, size) % (sizeof(kNames) / sizeof(kNames[0]))];
    t.dtype = kDTypes[Byte(data, size) % (sizeof(kDTypes) / sizeof(kDTypes[0]))];
    const int rank = Byte(data, size) % 3;
    for (int d = 0; d < rank; ++d) t.shape.push_back(Byte(data, size));
    t.file = "model.safetensors";
    t.begin_offset = Offset(data, size);
    t.end_offset = Offset(data, size);
  }
  std::vector<const metaload::TensorLayout*> claimed;
  for (const metaload::TensorLayout& t : claims) claimed.push_back(&t);
  // The file through the in-memory storage back end, as a daemon's would read it from disk.
  static metaload::MemoryFileSystem* const memory = new metaload::MemoryFileSystem();
  memory->Put("/m/model.safetensors", std::string(reinterpret_cast<const char*>(data), size));
  const std::unique_ptr<metaload::RandomAccessFile> file = *memory->Open("/m/model.safetensors");
  const absl::Status verdict = metaload::CheckFileHoldsClaims(*file, "m", claimed);
  if (!verdict.ok()) {
    if (verdict.code() != absl::StatusCode::kPermissionDenied) std::abort();
    return 0;
  }
  // Accepted: every claim is the header's own tensor, inside the file's data.
  absl::StatusOr<metaload::SafetensorsFile> header = metaload::ParseSafetensorsHeader(
      absl::string_view(reinterpret_cast<const char*>(data), size), size, "f");
  if (!header.ok() && !claims.empty()) std::abort();
  for (const metaload::TensorLayout& t : claims) {
    bool found = false;
    for (const metaload::TensorLayout& h : header->tensors) {
      if (h.name != t.name) continue;
      found = h.dtype == t.dtype && h.shape == t.shape && h.begin_offset == t.begin_offset &&
              h.end_offset == t.end_offset;
    }
    if (!found || t.begin_offset < header->data_begin_offset || t.end_offset > size) std::abort();
  }
  return 0;
}
