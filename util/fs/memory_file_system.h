// A FileSystem that holds its files in memory, for "mem://..." locations: the second back end
// behind util/fs/file_system.h, which shows what a new one takes (this file and one
// RegisterFileSystem call) and lets tests serve a checkpoint through every reader without a
// disk. Folders are implied by the files' locations; there are no links.
//
//   MemoryFileSystem& memory = RegisteredMemoryFileSystem();   // "mem://", registered once
//   memory.Put("mem://models/llama/model.safetensors", bytes);
//   ML_ASSIGN_OR_RETURN(Checkpoint c, OpenCheckpoint("mem://models/llama"));
//
// Each Put is a new version of its file: a handle opened before reads the bytes it opened
// (as a POSIX handle keeps an unlinked file), and says it changed (Unchanged() false).
// Thread-safety: every method may be called from several threads at once.
#ifndef METALOAD_UTIL_FS_MEMORY_FILE_SYSTEM_H_
#define METALOAD_UTIL_FS_MEMORY_FILE_SYSTEM_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "util/fs/file_system.h"

namespace metaload {

class MemoryFileSystem final : public FileSystem {
 public:
  struct Version {
    std::string bytes;
    int64_t mtime_ns = 0;
    uint64_t generation = 0;  // counts Puts: what Unchanged() compares
  };

  // Creates or replaces the file at `location` (normalized: util/fs/location.h).
  void Put(const std::string& location, std::string bytes, int64_t mtime_ns = 1);
  // Removes it; false when there was none.
  bool Remove(const std::string& location);

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override;
  // Under a root when its normal form is the root's or starts with the root and '/'.
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenUnderRoots(const std::string& path,
                                                                   const std::vector<std::string>& roots,
                                                                   bool same_device) override;
  absl::StatusOr<PathKind> KindOf(const std::string& path, bool follow_links) override;
  absl::StatusOr<std::vector<std::string>> List(const std::string& path) override;
  // The normal form; NotFound when no file is, or lies under, it.
  absl::StatusOr<std::string> Canonical(const std::string& path) override;

  // The version now at `location`, or null: what an open handle compares itself against.
  std::shared_ptr<const Version> Current(const std::string& normal_location) const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<const Version>> files_ ABSL_GUARDED_BY(mu_);  // by normal location
  uint64_t generations_ ABSL_GUARDED_BY(mu_) = 0;
};

// The one MemoryFileSystem of this process that serves "mem://", registered (RegisterFileSystem)
// on the first call and living until exit. Only tests and the test builds call it: a process
// that never does serves no mem:// location. Aborts if "mem" was registered to another.
MemoryFileSystem& RegisteredMemoryFileSystem();

}  // namespace metaload

#endif  // METALOAD_UTIL_FS_MEMORY_FILE_SYSTEM_H_
