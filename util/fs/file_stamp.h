// What a checkpoint file looked like when it was registered, and the checks that a file opened
// later still is that file, unchanged: a file rewritten in place after registration would
// otherwise be read at the old offsets and load garbage without a word, and a file renamed over
// it would be served in its place (docs/integrity.md).
//
//   // A rank, on any host: size and mtime, which every host that mounts the file sees alike.
//   ML_RETURN_IF_ERROR(CheckUnchangedSinceRegistration(file.path(), StampOf(file), registered));
//   // The daemon that registered it, on its own host: the very file too (device, inode, ctime).
//   ML_RETURN_IF_ERROR(CheckSameFileSinceRegistration(file.path(), StampOf(file), registered));
#ifndef METALOAD_UTIL_FILE_STAMP_H_
#define METALOAD_UTIL_FILE_STAMP_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace metaload {

class RandomAccessFile;  // util/fs/file_system.h

struct FileStamp {
  uint64_t size_bytes = 0;
  int64_t mtime_ns = 0;  // since the Unix epoch
  // Which file it was on the host that stamped it, and when its inode last changed (fstat's
  // st_dev, st_ino, st_ctime): a file renamed over the path has another inode, and one written
  // or given back its mtime since has a later ctime, which no user call can set back. Host-local:
  // compared only by the host that stamped it. 0 in stamps older than these fields and where a
  // back end has none.
  uint64_t device = 0;
  uint64_t inode = 0;
  int64_t ctime_ns = 0;
  // An object's version (S3: its ETag, RandomAccessFile::version()); "" for files. Unlike the
  // identity fields it means the same on every host, so both checks compare it where recorded.
  std::string version;
  // Registrations made before stamps existed carry zeros: such files are not checked.
  bool recorded() const { return size_bytes != 0 || mtime_ns != 0; }
  bool identity_recorded() const { return device != 0 || inode != 0 || ctime_ns != 0; }
};

// Every field alike (util/ and planner/ build as C++17: no defaulted comparison).
inline bool operator==(const FileStamp& a, const FileStamp& b) {
  return a.size_bytes == b.size_bytes && a.mtime_ns == b.mtime_ns && a.device == b.device &&
         a.inode == b.inode && a.ctime_ns == b.ctime_ns && a.version == b.version;
}
inline bool operator!=(const FileStamp& a, const FileStamp& b) { return !(a == b); }

// As fstat saw it when `file` was opened.
FileStamp StampOf(const RandomAccessFile& file);

// OK when `registered` is not recorded or has the size and mtime of `now`. Else
// FailedPrecondition: "<path> changed since it was registered: mtime 2026-11-30T17:01:02.123Z,
// registered 2026-11-30T16:00:00Z (size 123 bytes, as registered); run `metactl register
// --refresh llama-8b`", naming `model` ("NAME" when the caller does not know it). For readers on
// any host: device, inode and ctime are not compared.
absl::Status CheckUnchangedSinceRegistration(const std::string& path, const FileStamp& now,
                                             const FileStamp& registered, const std::string& model = "");
// The same, and where `registered` has them, the same device, inode and ctime: the file that was
// stamped, not another renamed over it with its size and mtime copied, nor it written with its
// mtime set back. Only on the host that stamped `registered` (the daemon that registered the
// file). The message names the fields that differ first ("inode 7, registered 5; ctime ...,
// registered ..."), then size and mtime "as registered".
absl::Status CheckSameFileSinceRegistration(const std::string& path, const FileStamp& now,
                                            const FileStamp& registered, const std::string& model = "");

// An mtime as RFC 3339 UTC with as many fraction digits as it has: 2026-11-30T17:01:02.123Z.
std::string FormatMtime(int64_t mtime_ns);

}  // namespace metaload

#endif  // METALOAD_UTIL_FILE_STAMP_H_
