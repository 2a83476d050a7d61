#include "planner/file_io.h"

#include <algorithm>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/status_macros.h"

namespace metaload {
namespace {

absl::Status ErrnoStatus(int err, const std::string& what) {
  std::string message = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT: case ENOTDIR: return absl::NotFoundError(message);
    case EACCES: case EPERM: return absl::PermissionDeniedError(message);
    default: return absl::UnavailableError(message);
  }
}

}  // namespace

absl::StatusOr<ReadOnlyFile> ReadOnlyFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open ", path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(err, absl::StrCat("cannot stat ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  }
  return ReadOnlyFile(path, fd, static_cast<uint64_t>(st.st_size));
}

ReadOnlyFile::ReadOnlyFile(ReadOnlyFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_bytes_(other.size_bytes_) {}

ReadOnlyFile& ReadOnlyFile::operator=(ReadOnlyFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_bytes_ = other.size_bytes_;
  }
  return *this;
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status ReadOnlyFile::ReadAt(uint64_t offset, absl::Span<uint8_t> out) const {
  uint64_t end = 0;
  if (__builtin_add_overflow(offset, static_cast<uint64_t>(out.size()), &end) || end > size_bytes_) {
    return absl::OutOfRangeError(absl::StrCat("range [", offset, ", ", offset + out.size(), ") of ", path_,
                                              " passes its size ", size_bytes_));
  }
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat("reading ", path_, " at ", offset + done));
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat(path_, " ended at ", offset + done, " while reading [", offset,
                                              ", ", end, "): the file was truncated"));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status ReadOnlyFile::ReadRuns(const StridedRuns& runs, uint64_t position, absl::Span<uint8_t> out) const {
  const uint64_t total = runs.total_bytes();
  if (position > total || out.size() > total - position) {
    return absl::OutOfRangeError(absl::StrCat("bytes [", position, ", +", out.size(), ") pass the ", total,
                                              " bytes of a slice of ", path_));
  }
  size_t done = 0;
  while (done < out.size()) {
    const uint64_t at = position + done;
    const uint64_t run = at / runs.run_bytes, into = at % runs.run_bytes;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(runs.run_bytes - into, out.size() - done));
    // run < run_count, so this offset is at most the runs' last byte, checked by ReadAt.
    ML_RETURN_IF_ERROR(ReadAt(runs.first_offset + run * runs.stride_bytes + into, out.subspan(done, n)));
    done += n;
  }
  return absl::OkStatus();
}

void ReadOnlyFile::WillNeed(uint64_t offset, uint64_t length) const {
  ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(length), POSIX_FADV_WILLNEED);
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, uint64_t max_size_bytes,
                                          absl::string_view what) {
  absl::StatusOr<ReadOnlyFile> file = ReadOnlyFile::Open(path);
  if (!file.ok()) return file.status();
  if (file->size_bytes() > max_size_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", file->size_bytes(), " bytes is too large for a ",
                                                   what, " (limit ", max_size_bytes, ")"));
  }
  std::string text(file->size_bytes(), '\0');
  absl::Status read = file->ReadAt(0, absl::MakeSpan(reinterpret_cast<uint8_t*>(text.data()), text.size()));
  if (!read.ok()) return read;
  return text;
}

absl::StatusOr<std::string> ResolveUnderRoots(const std::string& path, const std::vector<std::string>& roots) {
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) {
    return ErrnoStatus(errno, absl::StrCat("cannot resolve ", path));
  }
  std::string canonical(resolved);
  for (const std::string& root : roots) {
    if (canonical == root || absl::StartsWith(canonical, root == "/" ? root : absl::StrCat(root, "/"))) {
      return canonical;
    }
  }
  return absl::PermissionDeniedError(
      absl::StrCat(path, " is not under this daemon's roots [", absl::StrJoin(roots, ", "), "]"));
}

}  // namespace metaload
