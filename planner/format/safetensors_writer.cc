#include "planner/format/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "planner/format/safetensors.h"
#include "util/error_kind.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

namespace fs = std::filesystem;

// The position of each dtype in the safetensors library's `Dtype` enum. The library lays
// tensors out by descending rank, then by name, so that larger elements come first and stay
// aligned; following it makes our files byte-identical to `safetensors.numpy.save`.
int SafetensorsDTypeRank(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return 0;
    case DType::kU8:
      return 1;
    case DType::kI8:
      return 2;
    case DType::kF8E5M2:
      return 3;
    case DType::kF8E4M3:
      return 4;
    case DType::kI16:
      return 5;
    case DType::kU16:
      return 6;
    case DType::kF16:
      return 7;
    case DType::kBF16:
      return 8;
    case DType::kI32:
      return 9;
    case DType::kU32:
      return 10;
    case DType::kF32:
      return 11;
    case DType::kF64:
      return 12;
    case DType::kI64:
      return 13;
    case DType::kU64:
      return 14;
  }
  return 0;
}

struct PlacedTensor {
  const TensorToWrite* tensor;
  uint64_t size_bytes;
};

absl::StatusOr<uint64_t> CheckedSizeBytes(const TensorToWrite& tensor) {
  uint64_t size_bytes = static_cast<uint64_t>(DTypeSizeBytes(tensor.dtype));
  for (int64_t dim : tensor.shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor \"", tensor.name, "\": negative dimension in shape ", ShapeToString(tensor.shape)));
    }
    if (MulOverflows(size_bytes, static_cast<uint64_t>(dim), &size_bytes)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", tensor.name, "\": byte size of shape ",
                                                     ShapeToString(tensor.shape), " overflows 64 bits"));
    }
  }
  return size_bytes;
}

absl::Status ErrnoError(int error_number, absl::string_view what, const std::string& path) {
  return absl::ErrnoToStatus(error_number, absl::StrCat(path, ": ", what, ": ", std::strerror(error_number)));
}

absl::Status WriteAll(int fd, const uint8_t* data, uint64_t size_bytes, const std::string& path) {
  while (size_bytes > 0) {
    const ssize_t n = ::write(fd, data, size_bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(errno, "write failed", path);
    data += n;
    size_bytes -= static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

// Writes `path` through a temporary file beside it, renamed into place only when complete and
// synced, so a reader never sees a half-written checkpoint and a crash leaves the old file.
absl::Status WriteAtomically(const std::string& path,
                             const std::function<absl::Status(int fd)>& write_contents) {
  static std::atomic<uint64_t> next_temp_id{0};
  std::string temp_path;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    temp_path = absl::StrCat(path, ".tmp-", ::getpid(), "-", next_temp_id.fetch_add(1));
    // 0666 lets the umask decide the final permissions, as for any file a tool writes.
    fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt >= 100)) return ErrnoError(errno, "cannot create", temp_path);
  }
  absl::Status status = write_contents(fd);
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoError(errno, "fsync failed", temp_path);
  if (::close(fd) != 0 && status.ok()) status = ErrnoError(errno, "close failed", temp_path);
  if (status.ok() && ::rename(temp_path.c_str(), path.c_str()) != 0) {
    status = ErrnoError(errno, absl::StrCat("cannot rename ", temp_path, " to"), path);
  }
  if (!status.ok()) ::unlink(temp_path.c_str());
  return status;
}

// The header as the safetensors library writes it: `__metadata__` first, then tensors in
// data order, compact JSON, padded with spaces to a multiple of 8 bytes.
absl::StatusOr<std::string> BuildHeader(const std::vector<PlacedTensor>& placed,
                                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const PlacedTensor& p : placed) {
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = std::string(DTypeCode(p.tensor->dtype));
    entry["shape"] = p.tensor->shape;
    entry["data_offsets"] = {offset, offset + p.size_bytes};
    header[p.tensor->name] = std::move(entry);
    offset += p.size_bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::type_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor names and metadata must be valid UTF-8: ", e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > kMaxSafetensorsHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("header of ", text.size(), " bytes exceeds the ",
                                                   kMaxSafetensorsHeaderBytes,
                                                   "-byte limit readers enforce"));
  }
  return text;
}

absl::Status WriteSafetensorsFile(const std::string& path, const std::vector<const TensorToWrite*>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  std::vector<PlacedTensor> placed;
  absl::flat_hash_set<std::string> names;
  uint64_t total_bytes = 0;
  uint64_t largest_bytes = 0;
  for (const TensorToWrite* t : tensors) {
    if (t->name.empty() || t->name == "__metadata__") {
      return absl::InvalidArgumentError(absl::StrCat(path, ": invalid tensor name \"", t->name, "\""));
    }
    if (!names.insert(t->name).second) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor \"", t->name, "\" given twice"));
    }
    if (!t->fill) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor \"", t->name, "\" has no fill"));
    }
    absl::StatusOr<uint64_t> size_bytes = CheckedSizeBytes(*t);
    if (!size_bytes.ok()) return Annotate(size_bytes.status(), path);
    if (AddOverflows(total_bytes, *size_bytes, &total_bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": total size overflows 64 bits"));
    }
    largest_bytes = std::max(largest_bytes, *size_bytes);
    placed.push_back({t, *size_bytes});
  }
  std::sort(placed.begin(), placed.end(), [](const PlacedTensor& a, const PlacedTensor& b) {
    const int rank_a = SafetensorsDTypeRank(a.tensor->dtype), rank_b = SafetensorsDTypeRank(b.tensor->dtype);
    if (rank_a != rank_b) return rank_a > rank_b;
    return a.tensor->name < b.tensor->name;
  });
  absl::StatusOr<std::string> header = BuildHeader(placed, metadata);
  if (!header.ok()) return Annotate(header.status(), path);

  return WriteAtomically(path, [&](int fd) -> absl::Status {
    uint8_t length_prefix[8];
    for (int i = 0; i < 8; ++i) length_prefix[i] = static_cast<uint8_t>(header->size() >> (8 * i));
    ML_RETURN_IF_ERROR(WriteAll(fd, length_prefix, sizeof(length_prefix), path));
    ML_RETURN_IF_ERROR(WriteAll(fd, reinterpret_cast<const uint8_t*>(header->data()), header->size(), path));
    // `fill` produces a whole tensor at once, so one buffer as large as the largest tensor,
    // reused, is the least memory the interface allows; the file is never held whole.
    std::vector<uint8_t> buffer(largest_bytes);
    for (const PlacedTensor& p : placed) {
      absl::Span<uint8_t> out(buffer.data(), p.size_bytes);
      p.tensor->fill(out);
      ML_RETURN_IF_ERROR(WriteAll(fd, out.data(), out.size(), path));
    }
    return absl::OkStatus();
  });
}

absl::Status RefuseConflictingLayout(const fs::path& dir, const char* conflicting_name) {
  std::error_code ec;
  if (fs::exists(dir / conflicting_name, ec)) {
    return WithErrorKind(
        absl::FailedPreconditionError(
            absl::StrCat((dir / conflicting_name).string(),
                         " already exists and readers would take it for this checkpoint; ",
                         "remove it before writing a checkpoint of the other layout into ", dir.string())),
        ErrorKind::kBadInput);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> pointers;
  pointers.reserve(tensors.size());
  for (const TensorToWrite& t : tensors) pointers.push_back(&t);
  return WriteSafetensorsFile(path, pointers, metadata);
}

absl::Status WriteShardedCheckpoint(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                                    uint64_t max_shard_bytes) {
  // Grouping as transformers' save_pretrained does: start a new shard when the next tensor
  // would push a non-empty one past the limit.
  std::vector<std::vector<const TensorToWrite*>> shards(1);
  uint64_t shard_bytes = 0;
  uint64_t total_bytes = 0;
  absl::flat_hash_set<std::string> names;  // shards check only their own tensors
  for (const TensorToWrite& t : tensors) {
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(dir, ": tensor \"", t.name, "\" given twice"));
    }
    absl::StatusOr<uint64_t> size_bytes = CheckedSizeBytes(t);
    if (!size_bytes.ok()) return Annotate(size_bytes.status(), dir);
    uint64_t grown_bytes = 0;
    if (!shards.back().empty() &&
        (AddOverflows(shard_bytes, *size_bytes, &grown_bytes) || grown_bytes > max_shard_bytes)) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&t);
    shard_bytes += *size_bytes;
    if (AddOverflows(total_bytes, *size_bytes, &total_bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(dir, ": total size overflows 64 bits"));
    }
  }

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::ErrnoToStatus(ec.value(), absl::StrCat(dir, ": cannot create folder: ", ec.message()));
  // transformers refuses to load a safetensors shard whose metadata lacks "format".
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  const fs::path folder(dir);
  if (shards.size() == 1) {
    ML_RETURN_IF_ERROR(RefuseConflictingLayout(folder, "model.safetensors.index.json"));
    return WriteSafetensorsFile((folder / "model.safetensors").string(), shards[0], metadata);
  }
  ML_RETURN_IF_ERROR(RefuseConflictingLayout(folder, "model.safetensors"));

  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string shard_name = absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
    ML_RETURN_IF_ERROR(WriteSafetensorsFile((folder / shard_name).string(), shards[i], metadata));
    for (const TensorToWrite* t : shards[i]) weight_map[t->name] = shard_name;
  }
  // Written last, so that an interrupted write never leaves an index naming missing shards.
  nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", std::move(weight_map)}};
  const std::string index_text = index.dump(2) + "\n";
  const std::string index_path = (folder / "model.safetensors.index.json").string();
  return WriteAtomically(index_path, [&](int fd) {
    return WriteAll(fd, reinterpret_cast<const uint8_t*>(index_text.data()), index_text.size(), index_path);
  });
}

}  // namespace metaload
