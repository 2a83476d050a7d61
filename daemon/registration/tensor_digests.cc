#include "daemon/registration/tensor_digests.h"

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "util/hash/xxh3.h"
#include "util/log.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

// Large enough that a read costs far more than its system call, small enough to stay in cache
// while it is hashed (16 MiB: xxh3 runs at ~19 GB/s over it, a disk at 1-7 GB/s).
constexpr uint64_t kBlockBytes = 16 << 20;
// Below this a registration is quick and the log says only how long it took.
constexpr uint64_t kProgressFromBytes = 1ull << 30;
constexpr absl::Duration kProgressEvery = absl::Seconds(5);

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

// Logs how far the digests are, at most every kProgressEvery, for large models only.
class Progress {
 public:
  Progress(absl::string_view model, uint64_t total_bytes) : model_(model), total_bytes_(total_bytes) {}

  void Add(uint64_t bytes, const std::string& file) {
    done_bytes_ += bytes;
    if (total_bytes_ < kProgressFromBytes || absl::Now() - last_log_ < kProgressEvery) return;
    last_log_ = absl::Now();
    LogInfo(absl::StrFormat("RegisterModel %s: digests of %s of %s (%.0f%%), reading %s", model_,
                            FormatBytes(done_bytes_), FormatBytes(total_bytes_),
                            100.0 * static_cast<double>(done_bytes_) / static_cast<double>(total_bytes_),
                            file));
  }

  void Done(size_t tensor_count) const {
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start_);
    LogInfo(absl::StrFormat("RegisterModel %s: digests of %d tensors, %s, in %.2f s (%.2f GB/s)", model_,
                            tensor_count, FormatBytes(done_bytes_), seconds,
                            seconds > 0 ? static_cast<double>(done_bytes_) / seconds / 1e9 : 0.0));
  }

 private:
  const std::string model_;
  const uint64_t total_bytes_;
  uint64_t done_bytes_ = 0;
  const absl::Time start_ = absl::Now();
  absl::Time last_log_ = absl::Now();
};

absl::Status ChangedWhileRegistering(const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat(path, " changed while its tensors' digests were computed; register again"));
}

// The file as opened is the one whose stat the record holds (taken before the digests).
absl::Status CheckStat(const RandomAccessFile& file,
                       const std::map<std::string, const v1::FileStat*>& stat_of, const std::string& name) {
  auto stat = stat_of.find(name);
  if (stat == stat_of.end()) return absl::OkStatus();
  if (file.size_bytes() != stat->second->size_bytes() || file.mtime_ns() != stat->second->mtime_ns()) {
    return ChangedWhileRegistering(file.path());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RecordTensorDigests(const Checkpoint& checkpoint, absl::string_view model_name,
                                 const DigestFiles& files, const std::function<bool()>& should_stop,
                                 v1::ModelRecord* record) {
  auto open = [&files](const std::string& path) {
    return files.file_system->OpenUnderRoots(path, *files.roots, files.same_device);
  };
  const std::vector<TensorLayout>& tensors = checkpoint.tensors;
  if (static_cast<size_t>(record->tensors_size()) != tensors.size()) {
    return absl::InternalError(absl::StrCat("the record of ", model_name, " has ", record->tensors_size(),
                                            " tensors, its checkpoint ", tensors.size()));
  }
  std::map<std::string, const v1::FileStat*> stat_of;
  for (const v1::FileStat& stat : record->file_stats()) stat_of[stat.file()] = &stat;
  uint64_t total_bytes = 0;
  for (const TensorLayout& t : tensors) total_bytes += t.size_bytes();
  Progress progress(model_name, total_bytes);
  Xxh3Stream digest;
  // Tensors come sorted by (file, offset): each file is one sequential pass.
  for (size_t first = 0; first < tensors.size();) {
    const std::string& name = tensors[first].file;
    size_t last = first;
    uint64_t end_offset = 0;
    for (; last < tensors.size() && tensors[last].file == name; ++last) {
      end_offset = std::max(end_offset, tensors[last].end_offset);
    }
    const std::string path = absl::StrCat(checkpoint.dir, "/", name);
    ML_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, open(path));
    ML_RETURN_IF_ERROR(CheckStat(*file, stat_of, name));
    if (file->size_bytes() < end_offset) return ChangedWhileRegistering(path);
    SequentialReader reader(*file, end_offset);
    for (size_t t = first; t < last; ++t) {
      digest.Reset();
      for (uint64_t offset = tensors[t].begin_offset; offset < tensors[t].end_offset;) {
        if (should_stop && should_stop()) {
          return absl::CancelledError(absl::StrCat("registering ", model_name,
                                                   ": cancelled while computing digests (the caller gave up, "
                                                   "or the daemon is stopping)"));
        }
        absl::StatusOr<absl::Span<const uint8_t>> bytes = reader.Next(offset, tensors[t].end_offset - offset);
        if (!bytes.ok()) {
          return absl::Status(bytes.status().code(), absl::StrCat("computing the digest of ", tensors[t].name,
                                                                  ": ", bytes.status().message()));
        }
        digest.Update(*bytes);
        offset += bytes->size();
        progress.Add(bytes->size(), name);
      }
      record->mutable_tensors(static_cast<int>(t))->set_xxh3(digest.Digest());
    }
    first = last;
  }
  // A file rewritten while it was read would leave digests of neither version: its stat after
  // the reads must still be the recorded one.
  for (const auto& [name, stat] : stat_of) {
    ML_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file,
                        open(absl::StrCat(checkpoint.dir, "/", name)));
    ML_RETURN_IF_ERROR(CheckStat(*file, stat_of, name));
  }
  progress.Done(tensors.size());
  return absl::OkStatus();
}

}  // namespace metaload
