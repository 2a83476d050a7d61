// What a checkpoint file looked like when it was registered (size and mtime), and the check
// that a file opened later still does: a file rewritten in place after registration would
// otherwise be read at the old offsets and load garbage without a word (docs/integrity.md).
//
//   ML_RETURN_IF_ERROR(CheckUnchangedSinceRegistration(file.path(), StampOf(file), registered));
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
  // Registrations made before stamps existed carry zeros: such files are not checked.
  bool recorded() const { return size_bytes != 0 || mtime_ns != 0; }
};

// As fstat saw it when `file` was opened.
FileStamp StampOf(const RandomAccessFile& file);

// OK when `registered` is not recorded or equals `now`. Else FailedPrecondition: "<path> changed
// since it was registered: mtime 2026-11-30T17:01:02.123Z, registered 2026-11-30T16:00:00Z
// (size 123 bytes, as registered); run `metactl register --refresh llama-8b`", naming `model`
// ("NAME" when the caller does not know it).
absl::Status CheckUnchangedSinceRegistration(const std::string& path, const FileStamp& now,
                                             const FileStamp& registered, const std::string& model = "");

// An mtime as RFC 3339 UTC with as many fraction digits as it has: 2026-11-30T17:01:02.123Z.
std::string FormatMtime(int64_t mtime_ns);

}  // namespace metaload

#endif  // METALOAD_UTIL_FILE_STAMP_H_
