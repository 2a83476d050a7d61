#include "util/fs/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/error_kind.h"
#include "util/identifiers.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// Scratch for gaps that preadv reads past and for gathered spans; one per thread, reused.
uint8_t* Scratch() {
  thread_local std::unique_ptr<uint8_t[]> scratch(new uint8_t[kGatherWindowBytes]);
  return scratch.get();
}

}  // namespace

absl::Status ErrnoStatus(int err, absl::string_view what) {
  std::string message = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case ENOSPC:
    case EDQUOT:
      // Out of descriptors, memory or disk: the system failed, not "busy" (ResourceExhausted's
      // kind by default); retrying at once would not help.
      return WithErrorKind(absl::ResourceExhaustedError(message), ErrorKind::kFailure);
    case EIO:
      return absl::DataLossError(message);
    case EINVAL:
    case ENAMETOOLONG:
    case ELOOP:
      return absl::InvalidArgumentError(message);
    case EISDIR:
    case ENXIO:
    case ENODEV:  // a folder or a device where a file belongs: the path to fix
      return WithErrorKind(absl::FailedPreconditionError(message), ErrorKind::kBadInput);
    case EAGAIN:
    case EINTR:
    case EBUSY:
      return WithErrorKind(absl::UnavailableError(message), ErrorKind::kBusy);
    default:
      return absl::InternalError(message);
  }
}

bool GathersRuns(const StridedRuns& runs) {
  return runs.run_bytes < kSmallRunBytes && (runs.stride_bytes <= kMaxGatherStrideBytes ||
                                             runs.stride_bytes / kMaxGatherStrideRatio <= runs.run_bytes);
}

absl::StatusOr<ReadOnlyFile> ReadOnlyFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open ", path));
  return FromDescriptor(fd, path);
}

absl::StatusOr<ReadOnlyFile> ReadOnlyFile::FromDescriptor(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(err, absl::StrCat("cannot stat ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return WithErrorKind(absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file")),
                         ErrorKind::kBadInput);
  }
  const int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  const int64_t ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  // Every read here asks for exactly the bytes it needs (and WillNeed says which come next):
  // the kernel's sequential read-ahead would fetch the rows after them, which on a cluster are
  // other ranks' shards, billed to network storage (1.38x the needed bytes through an NFS-like
  // mount: tests/integration/cluster/test_emulated_cluster.py). Advice only: ignore failure.
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  return ReadOnlyFile(path, fd, static_cast<uint64_t>(st.st_size), mtime_ns, ctime_ns, st.st_dev, st.st_ino);
}

ReadOnlyFile::ReadOnlyFile(ReadOnlyFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      size_bytes_(other.size_bytes_),
      mtime_ns_(other.mtime_ns_),
      ctime_ns_(other.ctime_ns_),
      device_(other.device_),
      inode_(other.inode_),
      read_calls_(other.read_calls_.load()) {}

ReadOnlyFile& ReadOnlyFile::operator=(ReadOnlyFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_bytes_ = other.size_bytes_;
    mtime_ns_ = other.mtime_ns_;
    ctime_ns_ = other.ctime_ns_;
    device_ = other.device_;
    inode_ = other.inode_;
    read_calls_ = other.read_calls_.load();
  }
  return *this;
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<bool> ReadOnlyFile::Unchanged() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) return ErrnoStatus(errno, absl::StrCat("cannot stat ", path_));
  const int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  const int64_t ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return static_cast<uint64_t>(st.st_size) == size_bytes_ && mtime_ns == mtime_ns_ && ctime_ns == ctime_ns_ &&
         static_cast<uint64_t>(st.st_ino) == inode_;
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
    read_calls_.fetch_add(1, std::memory_order_relaxed);
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

absl::Status ReadOnlyFile::ReadRuns(const StridedRuns& runs, uint64_t position,
                                    absl::Span<uint8_t> out) const {
  const uint64_t total = runs.total_bytes();
  if (position > total || out.size() > total - position) {
    return absl::OutOfRangeError(absl::StrCat("bytes [", position, ", +", out.size(), ") pass the ", total,
                                              " bytes of a slice of ", path_));
  }
  if (out.empty()) return absl::OkStatus();
  if (runs.run_count == 1 || runs.stride_bytes == runs.run_bytes) {
    return ReadAt(runs.first_offset + position, out);  // contiguous
  }
  if (GathersRuns(runs)) return GatherSmallRuns(runs, position, out);
  if (runs.run_bytes >= kSmallRunBytes && runs.run_bytes < kLargeRunBytes &&
      runs.stride_bytes - runs.run_bytes <= runs.run_bytes) {
    return ReadRunsVectored(runs, position, out);
  }
  return ReadRunsOneByOne(*this, runs, position, out);  // large runs: one pread each
}

absl::Status ReadOnlyFile::GatherSmallRuns(const StridedRuns& runs, uint64_t position,
                                           absl::Span<uint8_t> out) const {
  uint8_t* const scratch = Scratch();
  // Whole runs per window: the first run's start to the last run's end fits the scratch.
  const uint64_t runs_per_window = runs.stride_bytes > kGatherWindowBytes - runs.run_bytes
                                       ? 1
                                       : (kGatherWindowBytes - runs.run_bytes) / runs.stride_bytes + 1;
  size_t done = 0;
  while (done < out.size()) {
    const uint64_t first_run = (position + done) / runs.run_bytes;
    const uint64_t last_run = std::min(runs.run_count - 1, first_run + runs_per_window - 1);
    const uint64_t span_begin = runs.first_offset + first_run * runs.stride_bytes;
    const uint64_t span_bytes = (last_run - first_run) * runs.stride_bytes + runs.run_bytes;
    ML_RETURN_IF_ERROR(ReadAt(span_begin, absl::MakeSpan(scratch, span_bytes)));
    for (uint64_t run = first_run; run <= last_run && done < out.size(); ++run) {
      const uint64_t into = (position + done) % runs.run_bytes;
      const size_t n = static_cast<size_t>(std::min<uint64_t>(runs.run_bytes - into, out.size() - done));
      std::memcpy(out.data() + done, scratch + (run - first_run) * runs.stride_bytes + into, n);
      done += n;
    }
  }
  return absl::OkStatus();
}

absl::Status ReadOnlyFile::ReadRunsVectored(const StridedRuns& runs, uint64_t position,
                                            absl::Span<uint8_t> out) const {
  uint8_t* const gap = Scratch();      // every gap lands here: gap <= run < kLargeRunBytes
  constexpr size_t kMaxIovecs = 1024;  // IOV_MAX on Linux
  struct iovec iov[kMaxIovecs];
  size_t done = 0;
  while (done < out.size()) {
    // One preadv: run pieces into `out`, the gaps between them into the scratch.
    const uint64_t start = position + done;
    const uint64_t file_offset =
        runs.first_offset + (start / runs.run_bytes) * runs.stride_bytes + start % runs.run_bytes;
    size_t count = 0, wanted = 0;
    uint64_t request_bytes = 0;
    while (count + 2 <= kMaxIovecs && done + wanted < out.size()) {
      const uint64_t at = position + done + wanted;
      const uint64_t into = at % runs.run_bytes;
      const size_t n =
          static_cast<size_t>(std::min<uint64_t>(runs.run_bytes - into, out.size() - done - wanted));
      iov[count++] = {out.data() + done + wanted, n};
      wanted += n;
      request_bytes += n;
      if (done + wanted < out.size()) {
        iov[count++] = {gap, static_cast<size_t>(runs.stride_bytes - runs.run_bytes)};
        request_bytes += runs.stride_bytes - runs.run_bytes;
      }
    }
    uint64_t end = 0;
    if (__builtin_add_overflow(file_offset, request_bytes, &end) || end > size_bytes_) {
      return absl::OutOfRangeError(absl::StrCat("range [", file_offset, ", +", request_bytes, ") of ", path_,
                                                " passes its size ", size_bytes_));
    }
    ssize_t n = ::preadv(fd_, iov, static_cast<int>(count), static_cast<off_t>(file_offset));
    read_calls_.fetch_add(1, std::memory_order_relaxed);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("reading ", path_, " at ", file_offset));
    if (static_cast<uint64_t>(n) != request_bytes) {
      // A short read (the file shrank, or the kernel stopped early): finish this batch run by
      // run, which reports truncation as ReadAt does.
      for (size_t i = 0; i < count; i += 2) {
        const uint64_t at = position + done;
        const uint64_t off =
            runs.first_offset + (at / runs.run_bytes) * runs.stride_bytes + at % runs.run_bytes;
        ML_RETURN_IF_ERROR(
            ReadAt(off, absl::MakeSpan(static_cast<uint8_t*>(iov[i].iov_base), iov[i].iov_len)));
        done += iov[i].iov_len;
      }
      continue;
    }
    done += wanted;
  }
  return absl::OkStatus();
}

void ReadOnlyFile::WillNeed(uint64_t offset, uint64_t length) const {
  ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(length), POSIX_FADV_WILLNEED);
}

absl::StatusOr<std::string> ResolveUnderRoots(const std::string& path,
                                              const std::vector<std::string>& roots) {
  if (path.empty() || path.size() >= PATH_MAX || path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("path ", QuoteForMessage(path), " must have 1 to ", PATH_MAX - 1, " bytes and no NUL"));
  }
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) {
    return ErrnoStatus(errno, absl::StrCat("cannot resolve ", QuoteForMessage(path, 512)));
  }
  std::string canonical(resolved);
  for (const std::string& root : roots) {
    if (IsUnderRoot(canonical, root)) return canonical;
  }
  return absl::PermissionDeniedError(absl::StrCat(
      QuoteForMessage(path, 512), " is not under this daemon's roots [", absl::StrJoin(roots, ", "), "]"));
}

}  // namespace metaload
