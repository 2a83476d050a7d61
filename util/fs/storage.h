// How a reader of checkpoint locations reaches them: every header, index, config.json and file
// stamp a reader takes goes through a Storage, which hands each location to the FileSystem of
// its scheme (util/fs/file_system.h) — POSIX paths, "mem://..." — and, for a daemon, keeps to
// its roots. The readers (OpenCheckpoint, ReadSafetensorsFile, the config and skeleton readers)
// take one; none opens, stats or lists a path itself.
//
//   ML_ASSIGN_OR_RETURN(Checkpoint c, OpenCheckpoint(dir));                  // the CLI, offline
//   const Storage daemon = Storage::UnderRoots(config.roots, {config.same_device});
//   ML_ASSIGN_OR_RETURN(Checkpoint c, OpenCheckpoint(dir, daemon));          // only under roots
//   ML_ASSIGN_OR_RETURN(Checkpoint c, OpenCheckpoint(dir, Storage::On(&faulty)));  // tests
//
// Thread-safety: const methods may be called from several threads at once.
#ifndef METALOAD_UTIL_FS_STORAGE_H_
#define METALOAD_UTIL_FS_STORAGE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "util/fs/confined_open.h"
#include "util/fs/file_system.h"

namespace metaload {

class Storage {
 public:
  // Every location this process can read, each through its scheme's FileSystem.
  Storage() = default;
  // Only files under `roots` (canonical), as FileSystem::OpenUnderRoots keeps to them (POSIX:
  // no symlink on the way; util/fs/confined_open.h). `roots` must outlive the Storage; so must
  // `file_system` when given (every location through it: a daemon's injected seam).
  static Storage UnderRoots(const std::vector<std::string>& roots, ConfineOptions options,
                            FileSystem* file_system = nullptr);
  // Every location through `file_system` (which must outlive the Storage), whatever its scheme:
  // the seam tests put faults behind. Null: by the location's scheme, as Storage().
  static Storage On(FileSystem* file_system);

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(const std::string& location) const;
  absl::StatusOr<PathKind> KindOf(const std::string& location, bool follow_links = true) const;
  // KindOf with an error of the storage counted as kMissing: for probes whose open, next, says
  // why a location cannot be read, naming it.
  PathKind KindOrMissing(const std::string& location, bool follow_links = true) const;
  absl::StatusOr<std::vector<std::string>> List(const std::string& location) const;
  // The location's canonical spelling (FileSystem::Canonical: POSIX resolves symbolic links)
  // and, for a Storage under roots, PermissionDenied naming the roots unless it lies under one
  // of them: what a daemon keeps a registration and a record's folder to, on every back end.
  absl::StatusOr<std::string> Canonical(const std::string& location) const;

 private:
  absl::StatusOr<FileSystem*> FileSystemOf(const std::string& location) const;

  FileSystem* file_system_ = nullptr;                // null: by the location's scheme
  const std::vector<std::string>* roots_ = nullptr;  // null: anywhere
  ConfineOptions options_;
};

// The whole file as text, for small files users hand us (configs, indexes, skeletons).
// InvalidArgument "<path>: N bytes is too large for a <what> (limit M)" past `max_size_bytes`,
// so a weights file passed by mistake is never read into memory whole.
absl::StatusOr<std::string> ReadSmallFile(const std::string& location, uint64_t max_size_bytes,
                                          absl::string_view what, const Storage& storage = {});

}  // namespace metaload

#endif  // METALOAD_UTIL_FS_STORAGE_H_
