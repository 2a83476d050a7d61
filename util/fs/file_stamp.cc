#include "util/fs/file_stamp.h"

#include <sys/sysmacros.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "util/fs/file_system.h"

namespace metaload {
namespace {

std::string FormatDevice(uint64_t device) {
  return absl::StrCat(major(static_cast<dev_t>(device)), ":", minor(static_cast<dev_t>(device)));
}

absl::Status CheckStamp(const std::string& path, const FileStamp& now, const FileStamp& registered,
                        const std::string& model, bool same_file) {
  if (!registered.recorded()) return absl::OkStatus();
  // What differs, "FIELD now, registered THEN", in this order; size and mtime that did not
  // change are said in parentheses after.
  std::vector<std::string> changed, kept;
  if (now.size_bytes != registered.size_bytes) {
    changed.push_back(absl::StrCat("size ", now.size_bytes, " bytes, registered ", registered.size_bytes));
  } else {
    kept.push_back(absl::StrCat("size ", now.size_bytes, " bytes, as registered"));
  }
  if (now.mtime_ns != registered.mtime_ns) {
    changed.push_back(
        absl::StrCat("mtime ", FormatMtime(now.mtime_ns), ", registered ", FormatMtime(registered.mtime_ns)));
  } else {
    kept.push_back(absl::StrCat("mtime ", FormatMtime(now.mtime_ns), ", as registered"));
  }
  if (!registered.version.empty() && now.version != registered.version) {
    changed.push_back(absl::StrCat("version ", now.version.empty() ? "none" : now.version, ", registered ",
                                   registered.version));
  }
  if (same_file && registered.identity_recorded()) {
    if (now.device != registered.device) {
      changed.push_back(absl::StrCat("device ", FormatDevice(now.device), ", registered ",
                                     FormatDevice(registered.device)));
    }
    if (now.inode != registered.inode) {
      changed.push_back(absl::StrCat("inode ", now.inode, ", registered ", registered.inode));
    }
    if (now.ctime_ns != registered.ctime_ns) {
      changed.push_back(absl::StrCat("ctime ", FormatMtime(now.ctime_ns), ", registered ",
                                     FormatMtime(registered.ctime_ns)));
    }
  }
  if (changed.empty()) return absl::OkStatus();
  std::string what = absl::StrJoin(changed, "; ");
  if (!kept.empty()) absl::StrAppend(&what, " (", absl::StrJoin(kept, "; "), ")");
  return absl::FailedPreconditionError(absl::StrCat(path, " changed since it was registered: ", what,
                                                    "; run `metactl register --refresh ",
                                                    model.empty() ? "NAME" : model, "`"));
}

}  // namespace

FileStamp StampOf(const RandomAccessFile& file) {
  return FileStamp{file.size_bytes(), file.mtime_ns(), file.device(),
                   file.inode(),      file.ctime_ns(), file.version()};
}

std::string FormatMtime(int64_t mtime_ns) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E*SZ", absl::FromUnixNanos(mtime_ns), absl::UTCTimeZone());
}

absl::Status CheckUnchangedSinceRegistration(const std::string& path, const FileStamp& now,
                                             const FileStamp& registered, const std::string& model) {
  return CheckStamp(path, now, registered, model, /*same_file=*/false);
}

absl::Status CheckSameFileSinceRegistration(const std::string& path, const FileStamp& now,
                                            const FileStamp& registered, const std::string& model) {
  return CheckStamp(path, now, registered, model, /*same_file=*/true);
}

}  // namespace metaload
