// The narrow seam reads of checkpoint bytes go through (LevelDB's `Env` is the model): a
// FileSystem says what a location is, lists folders and opens files; a RandomAccessFile reads
// them and says whether they changed. Which FileSystem serves a location is chosen by its
// scheme (FileSystemFor): a plain path is POSIX (FileSystem::Default(), over ReadOnlyFile and
// OpenUnderRoots, util/fs/file_io.h and confined_open.h); "mem://..." the in-memory one of
// memory_file_system.h once registered; a new back end is one file and one RegisterFileSystem.
// Tests hand readers one that injects faults in-process — EIO, files that shrink, corrupted
// bytes, slow reads (tests/faults/fault_file_system.h) — without a real failing disk.
// Readers of headers, indexes and configs reach it through a Storage (util/fs/storage.h).
//
//   ML_ASSIGN_OR_RETURN(FileSystem* fs, FileSystemFor(location));
//   ML_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, fs->Open(location));
//   ML_RETURN_IF_ERROR(file->ReadAt(offset, absl::MakeSpan(dest, length)));
//
// Thread-safety: a FileSystem may be used from several threads at once; so may a
// RandomAccessFile's reads (pread), as ReadOnlyFile's.
#ifndef METALOAD_UTIL_FS_FILE_SYSTEM_H_
#define METALOAD_UTIL_FS_FILE_SYSTEM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "util/strided_runs.h"

namespace metaload {

// An open, read-only file. Errors are ReadOnlyFile's (util/fs/file_io.h): OutOfRange for a range
// past the size the file had when opened, DataLoss when it is shorter now or the device failed.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;

  virtual const std::string& path() const = 0;
  virtual uint64_t size_bytes() const = 0;  // when opened
  virtual int64_t mtime_ns() const = 0;     // when opened, ns since the Unix epoch
  // Which file it is on this host and when its inode last changed, when opened (POSIX: fstat's
  // st_dev, st_ino and st_ctime; a rename over the path gives another inode, and a write, or
  // an mtime set back, a later ctime that no user call can set back). 0 where a back end has
  // none: then a stamp holds size and mtime only (util/fs/file_stamp.h).
  virtual uint64_t device() const { return 0; }
  virtual uint64_t inode() const { return 0; }
  virtual int64_t ctime_ns() const { return 0; }
  // Which version of an object it is, when opened, where a back end has versions (S3: the
  // ETag, which changes whenever the object is replaced, even within its Last-Modified second
  // at the same size). "" for files: their stamp is size, mtime and identity.
  virtual std::string version() const { return {}; }
  // Fills all of `out` from `offset`.
  virtual absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> out) const = 0;
  // Fills `out` with bytes [position, position + out.size()) of `runs` laid end to end.
  virtual absl::Status ReadRuns(const StridedRuns& runs, uint64_t position,
                                absl::Span<uint8_t> out) const = 0;
  // A hint: [offset, offset + length) will be read soon.
  virtual void WillNeed(uint64_t offset, uint64_t length) const = 0;
  // A hint: `runs` will be read soon, in order (a daemon's ReadRange stream). Files: WillNeed
  // over their span; an object store fetches ahead of the reader where that costs no bytes the
  // runs do not need beyond what ReadRuns reads anyway (s3_read_ahead.h).
  virtual void WillRead(const StridedRuns& runs) const {
    if (runs.run_count > 0) WillNeed(runs.first_offset, runs.span_bytes());
  }
  // Ends the reads of this handle in flight and to come, at once where they could wait long (an
  // object store's GETs: Cancelled); a file's preads are short and go on. From any thread: a
  // daemon's stream whose reader went away, so that its io thread is not held by a stalled GET.
  virtual void Cancel() const {}
  // Whether the file is still the one opened, unchanged since (POSIX: its size, mtime, ctime and
  // inode through this handle; an object: its version): false means bytes read so far may mix
  // two versions of it.
  virtual absl::StatusOr<bool> Unchanged() const = 0;
};

// What a location names. kLink only where the caller asked not to follow links.
enum class PathKind { kMissing, kFile, kFolder, kLink, kOther };

// RandomAccessFile::ReadRuns by one ReadAt per run: the plain way every implementation may use.
// REQUIRES: [position, position + out.size()) lies within `runs`' total.
absl::Status ReadRunsOneByOne(const RandomAccessFile& file, const StridedRuns& runs, uint64_t position,
                              absl::Span<uint8_t> out);

class FileSystem;

// FileSystem::OpenUnderRoots for a back end without links (mem://, s3://): `file_system`'s Open
// of `path` when its normal form lies under one of `roots`' (IsUnderRoot), else PermissionDenied
// "<path> is not under this daemon's roots [...]".
absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenUnderRootsByName(FileSystem& file_system,
                                                                       const std::string& path,
                                                                       const std::vector<std::string>& roots);

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // The POSIX file system; never null, lives as long as the process.
  static FileSystem* Default();
  // Every location through the FileSystem its scheme names (FileSystemFor), POSIX paths through
  // Default(): what a daemon reads through unless a test injects one. Never null.
  static FileSystem* ByScheme();

  // ReadOnlyFile::Open's errors.
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) = 0;
  // `path` only when it lies under one of `roots` (canonical), opened with no symlink on the way
  // and, with `same_device`, on its root's mount with one link: OpenUnderRoots' errors
  // (util/fs/confined_open.h).
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenUnderRoots(
      const std::string& path, const std::vector<std::string>& roots, bool same_device) = 0;
  // What `path` is; `follow_links` false: a symbolic link is kLink, whatever it leads to (so
  // that the opener, which keeps to the roots, decides; answering for the target would tell
  // whether a path outside the roots exists). Errors other than "absent" are returned.
  virtual absl::StatusOr<PathKind> KindOf(const std::string& path, bool follow_links) = 0;
  // The names in folder `path`, sorted (not "." or ".."). NotFound when it is no folder.
  virtual absl::StatusOr<std::vector<std::string>> List(const std::string& path) = 0;
  // Whether this back end is an object store (S3): every read a request to a bucket that all
  // hosts share, priced and throttled per request and per byte. Under `--source auto` a rank
  // then reads through a daemon that serves the file instead of fetching the bucket itself,
  // so that a node fetches each range once, not once per rank (client/read/fill.h). POSIX and
  // mem:// answer false: a host reads its own disk or page cache.
  virtual bool IsObjectStore() const { return false; }
  // The one spelling of `path` that roots are compared with (a daemon's roots, the folder a
  // model is registered from): POSIX resolves every symbolic link (realpath); a back end without
  // links gives the location's normal form (util/fs/location.h). NotFound when nothing is there.
  virtual absl::StatusOr<std::string> Canonical(const std::string& path) = 0;
};

// The FileSystem that serves `location`: the one registered for its scheme ("mem://a/b" is
// "mem"), the POSIX one for a location without "scheme://". InvalidArgument for a scheme
// nothing registered, naming the ones there are.
absl::StatusOr<FileSystem*> FileSystemFor(absl::string_view location);
// Whether `location` is served by an object store (FileSystem::IsObjectStore); false for a
// scheme nothing registered. The one test of it: a rank's source choice (client/read/fill.cc)
// and its fan-out scope (client/load/fanout.cc) both ask here.
bool IsObjectStoreLocation(absl::string_view location);
// `scheme` (letters, digits, '+', '-', '.'; not "file") serves every "scheme://..." location
// from now on; `file_system` must live until exit. InvalidArgument for a bad or taken scheme.
absl::Status RegisterFileSystem(const std::string& scheme, FileSystem* file_system);

}  // namespace metaload

#endif  // METALOAD_UTIL_FS_FILE_SYSTEM_H_
