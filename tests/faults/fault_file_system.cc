#include "tests/faults/fault_file_system.h"

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "util/fs/file_io.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// Reads through `base`, changed by the faults `fs` says apply.
class FaultyFile final : public RandomAccessFile {
 public:
  FaultyFile(std::unique_ptr<RandomAccessFile> base, FaultFileSystem* fs) : base_(std::move(base)), fs_(fs) {}

  const std::string& path() const override { return base_->path(); }
  uint64_t size_bytes() const override { return base_->size_bytes(); }
  int64_t mtime_ns() const override { return base_->mtime_ns(); }
  uint64_t device() const override { return base_->device(); }
  uint64_t inode() const override { return base_->inode(); }
  int64_t ctime_ns() const override { return base_->ctime_ns(); }
  void WillNeed(uint64_t offset, uint64_t length) const override { base_->WillNeed(offset, length); }
  void WillRead(const StridedRuns& runs) const override { base_->WillRead(runs); }
  void Cancel() const override { base_->Cancel(); }
  absl::StatusOr<bool> Unchanged() const override { return base_->Unchanged(); }

  absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> out) const override {
    const uint64_t end = offset + out.size();  // the base checks the range first
    std::vector<FileFault> faults = fs_->Take(path(), offset, out.size());
    for (const FileFault& fault : faults) {
      if (fault.kind == FileFault::kSlow) absl::SleepFor(fault.delay);
    }
    for (const FileFault& fault : faults) {
      if (fault.kind == FileFault::kEio) {
        return ErrnoStatus(EIO, absl::StrCat("reading ", path(), " at ", std::max(offset, fault.at_byte)));
      }
      if (fault.kind == FileFault::kShrink && offset + out.size() <= size_bytes()) {
        // What ReadOnlyFile says when pread finds the end early.
        const uint64_t kept = fault.at_byte > offset ? fault.at_byte - offset : 0;
        ML_RETURN_IF_ERROR(base_->ReadAt(offset, out.subspan(0, kept)));
        return absl::DataLossError(absl::StrCat(path(), " ended at ", offset + kept, " while reading [",
                                                offset, ", ", end, "): the file was truncated"));
      }
    }
    ML_RETURN_IF_ERROR(base_->ReadAt(offset, out));
    for (const FileFault& fault : faults) {
      if (fault.kind == FileFault::kCorrupt) out[fault.at_byte - offset] ^= 0xFF;
    }
    return absl::OkStatus();
  }

  // Run by run through ReadAt, so that every fault applies as it would to one pread (the POSIX
  // file's batching is a speed-up, not a behaviour).
  absl::Status ReadRuns(const StridedRuns& runs, uint64_t position, absl::Span<uint8_t> out) const override {
    const uint64_t total = runs.total_bytes();
    if (position > total || out.size() > total - position) return base_->ReadRuns(runs, position, out);
    return ReadRunsOneByOne(*this, runs, position, out);
  }

 private:
  const std::unique_ptr<RandomAccessFile> base_;
  FaultFileSystem* const fs_;
};

bool Touches(const FileFault& fault, uint64_t offset, uint64_t length) {
  switch (fault.kind) {
    case FileFault::kEio:
    case FileFault::kShrink:
      return offset + length > fault.at_byte;
    case FileFault::kCorrupt:
      return fault.at_byte >= offset && fault.at_byte < offset + length;
    case FileFault::kSlow:
      return true;
  }
  return false;
}

}  // namespace

void FaultFileSystem::Add(FileFault fault) {
  absl::MutexLock lock(&mu_);
  faults_.push_back(std::move(fault));
}

void FaultFileSystem::Clear() {
  absl::MutexLock lock(&mu_);
  faults_.clear();
}

std::vector<FileFault> FaultFileSystem::Take(const std::string& path, uint64_t offset, uint64_t length) {
  std::vector<FileFault> hits;
  absl::MutexLock lock(&mu_);
  for (FileFault& fault : faults_) {
    if (fault.times == 0 || !absl::EndsWith(path, fault.path_suffix) || !Touches(fault, offset, length))
      continue;
    if (fault.times > 0) --fault.times;
    hits.push_back(fault);
  }
  if (!hits.empty()) injected_.fetch_add(1);
  return hits;
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> FaultFileSystem::Wrap(
    absl::StatusOr<std::unique_ptr<RandomAccessFile>> file) {
  if (!file.ok()) return file.status();
  return std::unique_ptr<RandomAccessFile>(std::make_unique<FaultyFile>(*std::move(file), this));
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> FaultFileSystem::Open(const std::string& path) {
  return Wrap(base_->Open(path));
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> FaultFileSystem::OpenUnderRoots(
    const std::string& path, const std::vector<std::string>& roots, bool same_device) {
  return Wrap(base_->OpenUnderRoots(path, roots, same_device));
}

}  // namespace metaload
