#include "util/fs/file_stamp.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "util/fs/file_system.h"

namespace metaload {

FileStamp StampOf(const RandomAccessFile& file) { return FileStamp{file.size_bytes(), file.mtime_ns()}; }

std::string FormatMtime(int64_t mtime_ns) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E*SZ", absl::FromUnixNanos(mtime_ns), absl::UTCTimeZone());
}

absl::Status CheckUnchangedSinceRegistration(const std::string& path, const FileStamp& now,
                                             const FileStamp& registered, const std::string& model) {
  if (!registered.recorded()) return absl::OkStatus();
  const bool size_changed = now.size_bytes != registered.size_bytes;
  const bool mtime_changed = now.mtime_ns != registered.mtime_ns;
  if (!size_changed && !mtime_changed) return absl::OkStatus();
  const std::string size =
      size_changed ? absl::StrCat("size ", now.size_bytes, " bytes, registered ", registered.size_bytes)
                   : absl::StrCat("size ", now.size_bytes, " bytes, as registered");
  const std::string mtime = mtime_changed
                                ? absl::StrCat("mtime ", FormatMtime(now.mtime_ns), ", registered ",
                                               FormatMtime(registered.mtime_ns))
                                : absl::StrCat("mtime ", FormatMtime(now.mtime_ns), ", as registered");
  // The changed one first; the other in parentheses when it did not change.
  std::string what;
  if (size_changed && mtime_changed) {
    what = absl::StrCat(size, "; ", mtime);
  } else if (size_changed) {
    what = absl::StrCat(size, " (", mtime, ")");
  } else {
    what = absl::StrCat(mtime, " (", size, ")");
  }
  return absl::FailedPreconditionError(absl::StrCat(path, " changed since it was registered: ", what,
                                                    "; run `metactl register --refresh ",
                                                    model.empty() ? "NAME" : model, "`"));
}

}  // namespace metaload
