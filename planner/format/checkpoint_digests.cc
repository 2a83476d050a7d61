#include "planner/format/checkpoint_digests.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "util/fs/file_stamp.h"
#include "util/fs/location.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// Large enough that a read costs far more than its system call, small enough to stay in cache
// while it is hashed (16 MiB: fast tiles run at ~10-17 GB/s over it, a disk at 1-7 GB/s).
constexpr uint64_t kBlockBytes = 16 << 20;

// Hands out a file's bytes in order up to `end_offset`, reading each block once.
class SequentialReader {
 public:
  SequentialReader(const RandomAccessFile& file, uint64_t end_offset)
      : file_(file), end_offset_(end_offset), block_(std::min(kBlockBytes, end_offset)) {}

  // At least one and at most `max_bytes` bytes from `offset`. REQUIRES: offset < end_offset.
  absl::StatusOr<absl::Span<const uint8_t>> Next(uint64_t offset, uint64_t max_bytes) {
    if (offset < begin_ || offset >= end_) {
      const uint64_t length = std::min<uint64_t>(block_.size(), end_offset_ - offset);
      ML_RETURN_IF_ERROR(file_.ReadAt(offset, absl::MakeSpan(block_.data(), length)));
      begin_ = offset;
      end_ = offset + length;
    }
    return absl::MakeConstSpan(block_.data() + (offset - begin_), std::min(max_bytes, end_ - offset));
  }

 private:
  const RandomAccessFile& file_;
  const uint64_t end_offset_;
  std::vector<uint8_t> block_;
  uint64_t begin_ = 0, end_ = 0;  // the bytes block_ holds: [begin_, end_)
};

absl::Status Changed(const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat(path, " changed while its tensors' digests were computed; try again"));
}

absl::Status CheckExpected(const RandomAccessFile& file, const DigestPassOptions& options,
                           const std::string& name) {
  auto expected = options.expected.find(name);
  if (expected == options.expected.end()) return absl::OkStatus();
  // The host that read the headers digests the files: the very files, not ones of their size
  // and mtime renamed over them since.
  if (!CheckSameFileSinceRegistration(file.path(), StampOf(file), expected->second).ok()) {
    return Changed(file.path());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<TensorDigest>> DigestCheckpoint(const Checkpoint& checkpoint, DigestKind kind,
                                                           const Storage& storage,
                                                           const DigestPassOptions& options) {
  const std::vector<TensorLayout>& tensors = checkpoint.tensors;
  std::vector<TensorDigest> out(tensors.size());
  // Tensors come sorted by (file, offset): each file is one sequential pass.
  for (size_t first = 0; first < tensors.size();) {
    const std::string& name = tensors[first].file;
    size_t last = first;
    uint64_t end_offset = 0;
    for (; last < tensors.size() && tensors[last].file == name; ++last) {
      end_offset = std::max(end_offset, tensors[last].end_offset);
    }
    const std::string path = JoinLocation(checkpoint.dir, name);
    ML_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, storage.Open(path));
    ML_RETURN_IF_ERROR(CheckExpected(*file, options, name));
    if (file->size_bytes() < end_offset) return Changed(path);
    SequentialReader reader(*file, end_offset);
    for (size_t t = first; t < last; ++t) {
      const TensorLayout& tensor = tensors[t];
      const TileGrid grid =
          TileGridFor(kind, tensor.shape, static_cast<uint64_t>(DTypeSizeBytes(tensor.dtype)));
      TileProof proof(kind, grid, {StridedRuns{0, tensor.size_bytes(), tensor.size_bytes(), 1}});
      for (uint64_t offset = tensor.begin_offset; offset < tensor.end_offset;) {
        if (options.should_stop && options.should_stop()) {
          return absl::CancelledError(
              "cancelled while computing digests (the caller gave up, or the daemon is stopping)");
        }
        absl::StatusOr<absl::Span<const uint8_t>> bytes = reader.Next(offset, tensor.end_offset - offset);
        if (!bytes.ok()) {
          return absl::Status(bytes.status().code(), absl::StrCat("computing the digest of ", tensor.name,
                                                                  ": ", bytes.status().message()));
        }
        proof.Add(offset - tensor.begin_offset, *bytes);
        offset += bytes->size();
        if (options.on_bytes) options.on_bytes(bytes->size(), name);
      }
      TensorProofSum sum = proof.Finish();
      out[t] = TensorDigest{kind, grid.tile_bytes, LanesToBytes(sum.lanes)};
    }
    first = last;
  }
  // A file rewritten while it was read would leave digests of neither version: as it is after
  // the reads, it must still be as expected.
  for (const auto& [name, stamp] : options.expected) {
    ML_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file,
                        storage.Open(JoinLocation(checkpoint.dir, name)));
    ML_RETURN_IF_ERROR(CheckExpected(*file, options, name));
  }
  return out;
}

}  // namespace metaload
