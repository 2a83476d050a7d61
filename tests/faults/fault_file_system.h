// A FileSystem (util/fs/file_system.h) that injects faults into the reads of the files it
// matches, in-process: a device that fails with EIO, a file that shrinks under its reader, a
// corrupted byte, a slow disk. For tests only: it is linked into test binaries, never into
// metad or libmetaload.so.
//
//   FaultFileSystem fs;
//   fs.Add({.kind = FileFault::kEio, .path_suffix = "model-00002-of-00003.safetensors", .at_byte = 4096});
//   FillSettings settings;  settings.read.file_system = &fs;   // reads of that file fail past 4096
//
// Thread-safety: Add and Clear may be called while files opened from it are read.
#ifndef METALOAD_TESTS_FAULTS_FAULT_FILE_SYSTEM_H_
#define METALOAD_TESTS_FAULTS_FAULT_FILE_SYSTEM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "util/fs/file_system.h"

namespace metaload {

struct FileFault {
  enum Kind {
    kEio,      // a read that touches a byte at or past `at_byte` fails as pread's EIO does (DataLoss)
    kShrink,   // the file ends at `at_byte` now: a read past it stops there (DataLoss, "truncated")
    kCorrupt,  // the byte at `at_byte` reads with all its bits flipped
    kSlow,     // every read first sleeps `delay`
  };
  Kind kind = kEio;
  std::string path_suffix;  // the files whose path ends with it; empty: every file
  uint64_t at_byte = 0;
  absl::Duration delay = absl::ZeroDuration();
  // How many reads it may hit before it is spent; negative: every one.
  int64_t times = -1;
};

class FaultFileSystem final : public FileSystem {
 public:
  // `base` reads the bytes (default: the POSIX file system); it must outlive this.
  explicit FaultFileSystem(FileSystem* base = FileSystem::Default()) : base_(base) {}

  void Add(FileFault fault);
  void Clear();
  // Reads a fault changed so far (a slowed read counts too).
  uint64_t faults_injected() const { return injected_.load(); }
  // Answers IsObjectStore() true from now on: a POSIX folder read as a rank reads a bucket.
  void ActAsObjectStore() { object_store_ = true; }
  bool IsObjectStore() const override { return object_store_.load() || base_->IsObjectStore(); }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenUnderRoots(const std::string& path,
                                                                   const std::vector<std::string>& roots,
                                                                   bool same_device) override;
  absl::StatusOr<PathKind> KindOf(const std::string& path, bool follow_links) override {
    return base_->KindOf(path, follow_links);
  }
  absl::StatusOr<std::vector<std::string>> List(const std::string& path) override {
    return base_->List(path);
  }
  absl::StatusOr<std::string> Canonical(const std::string& path) override { return base_->Canonical(path); }

  // The faults that apply to a read of [offset, offset + length) of `path`, each counted as used.
  std::vector<FileFault> Take(const std::string& path, uint64_t offset, uint64_t length);

 private:
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Wrap(
      absl::StatusOr<std::unique_ptr<RandomAccessFile>> file);

  FileSystem* const base_;
  absl::Mutex mu_;
  std::vector<FileFault> faults_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> injected_{0};
  std::atomic<bool> object_store_{false};
};

}  // namespace metaload

#endif  // METALOAD_TESTS_FAULTS_FAULT_FILE_SYSTEM_H_
