// Read-only file access with explicit errors, and confinement of paths to allowed roots.
//
//   ML_ASSIGN_OR_RETURN(ReadOnlyFile f, ReadOnlyFile::Open(path));
//   ML_RETURN_IF_ERROR(f.ReadAt(offset, absl::MakeSpan(dest, length)));
//
// Thread-safety: ReadAt and ReadRuns may be called from several threads at once (pread).
#ifndef METALOAD_UTIL_FILE_IO_H_
#define METALOAD_UTIL_FILE_IO_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "util/fs/file_system.h"
#include "util/strided_runs.h"

namespace metaload {

// The POSIX RandomAccessFile (util/fs/file_system.h): what FileSystem::Default() opens.
class ReadOnlyFile final : public RandomAccessFile {
 public:
  // NotFound / PermissionDenied / FailedPrecondition (not a regular file), naming the path;
  // other errors by errno's meaning (ErrnoStatus). Opened non-blocking, so that a FIFO or a
  // device placed where a checkpoint file was expected is refused at once instead of
  // blocking the caller forever.
  static absl::StatusOr<ReadOnlyFile> Open(const std::string& path);
  // Takes `fd` (opened read-only; closed here on error), known by `path` for messages:
  // FailedPrecondition unless it is a regular file.
  static absl::StatusOr<ReadOnlyFile> FromDescriptor(int fd, const std::string& path);

  ReadOnlyFile(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile& operator=(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  ~ReadOnlyFile() override;

  const std::string& path() const override { return path_; }
  uint64_t size_bytes() const override { return size_bytes_; }
  // Modification time when opened (fstat), ns since the Unix epoch.
  int64_t mtime_ns() const override { return mtime_ns_; }
  uint64_t device() const override { return device_; }
  uint64_t inode() const override { return inode_; }
  int64_t ctime_ns() const override { return ctime_ns_; }
  int fd() const { return fd_; }

  // Fills all of `out` from `offset`. OutOfRange when the range passes the file's size as
  // opened; DataLoss when the file is shorter now (truncated while in use).
  absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> out) const override;

  // Fills `out` with bytes [position, position + out.size()) of `runs` laid end to end (a
  // tensor slice, planner/plan/slice.h). Small runs are batched so that system calls stay few
  // whatever the run size: runs under kSmallRunBytes that lie close together are gathered
  // from one read of their span (at most kGatherWindowBytes a call); runs of at least
  // kSmallRunBytes but under kLargeRunBytes, with gaps no longer than themselves, with
  // preadv (gaps into a scratch buffer, the runs straight into `out`); other runs with one
  // pread each. Errors as for ReadAt; OutOfRange also when `out` passes the runs' total.
  absl::Status ReadRuns(const StridedRuns& runs, uint64_t position, absl::Span<uint8_t> out) const override;

  // System calls that read (pread, preadv) made through this handle so far.
  uint64_t read_calls() const { return read_calls_.load(std::memory_order_relaxed); }

  // Tells the kernel we will read [offset, offset+length) soon (readahead).
  void WillNeed(uint64_t offset, uint64_t length) const override;
  // fstat through the handle: the size, mtime, ctime, device and inode it had when opened.
  absl::StatusOr<bool> Unchanged() const override;

 private:
  ReadOnlyFile(std::string path, int fd, uint64_t size_bytes, int64_t mtime_ns, int64_t ctime_ns,
               uint64_t device, uint64_t inode)
      : path_(std::move(path)),
        fd_(fd),
        size_bytes_(size_bytes),
        mtime_ns_(mtime_ns),
        ctime_ns_(ctime_ns),
        device_(device),
        inode_(inode) {}
  absl::Status GatherSmallRuns(const StridedRuns& runs, uint64_t position, absl::Span<uint8_t> out) const;
  absl::Status ReadRunsVectored(const StridedRuns& runs, uint64_t position, absl::Span<uint8_t> out) const;

  std::string path_;
  int fd_ = -1;
  uint64_t size_bytes_ = 0;
  int64_t mtime_ns_ = 0;
  int64_t ctime_ns_ = 0;
  uint64_t device_ = 0;
  uint64_t inode_ = 0;
  mutable std::atomic<uint64_t> read_calls_{0};
};

// How ReadRuns batches (see there).
inline constexpr uint64_t kSmallRunBytes = 4096;
inline constexpr uint64_t kLargeRunBytes = 64 << 10;
inline constexpr uint64_t kGatherWindowBytes = 1 << 20;
// Runs under kSmallRunBytes are gathered when their stride is at most this, or at most
// kMaxGatherStrideRatio runs long: at most that many bytes read per byte wanted.
inline constexpr uint64_t kMaxGatherStrideBytes = 64 << 10;
inline constexpr uint64_t kMaxGatherStrideRatio = 64;
bool GathersRuns(const StridedRuns& runs);

// An errno as a status by its meaning: ENOENT/ENOTDIR NotFound, EACCES/EPERM/EROFS
// PermissionDenied, EMFILE/ENFILE/ENOMEM/ENOSPC ResourceExhausted (fix the limit first),
// EIO DataLoss (the device failed), EINVAL/ENAMETOOLONG/ELOOP InvalidArgument,
// EISDIR/ENXIO/ENODEV FailedPrecondition, EAGAIN/EINTR/EBUSY Unavailable (retry), else
// Internal. The message is "<what>: <strerror>".
absl::Status ErrnoStatus(int err, absl::string_view what);

// Canonical path of `path` (symlinks resolved) if it lies inside one of `roots` (canonical
// folders); PermissionDenied naming the roots otherwise, NotFound when it does not exist.
// This is what keeps a daemon from serving /etc/shadow or ../../ escapes.
absl::StatusOr<std::string> ResolveUnderRoots(const std::string& path, const std::vector<std::string>& roots);

}  // namespace metaload

#endif  // METALOAD_UTIL_FILE_IO_H_
