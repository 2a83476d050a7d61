// Read-only file access with explicit errors, and confinement of paths to allowed roots.
//
//   ML_ASSIGN_OR_RETURN(ReadOnlyFile f, ReadOnlyFile::Open(path));
//   ML_RETURN_IF_ERROR(f.ReadAt(offset, absl::MakeSpan(dest, length)));
//
// Thread-safety: ReadAt may be called from several threads at once (it uses pread).
#ifndef METALOAD_PLANNER_FILE_IO_H_
#define METALOAD_PLANNER_FILE_IO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "planner/slice.h"

namespace metaload {

class ReadOnlyFile {
 public:
  // NotFound / PermissionDenied / FailedPrecondition (not a regular file), naming the path.
  static absl::StatusOr<ReadOnlyFile> Open(const std::string& path);

  ReadOnlyFile(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile& operator=(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  ~ReadOnlyFile();

  const std::string& path() const { return path_; }
  uint64_t size_bytes() const { return size_bytes_; }
  int fd() const { return fd_; }

  // Fills all of `out` from `offset`. OutOfRange when the range passes the file's size as
  // opened; DataLoss when the file is shorter now (truncated while in use).
  absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> out) const;

  // Fills `out` with bytes [position, position + out.size()) of `runs` laid end to end (a
  // tensor slice, planner/slice.h): one pread per run touched, never a byte outside the runs.
  // Errors as for ReadAt; OutOfRange also when `out` passes the runs' total.
  absl::Status ReadRuns(const StridedRuns& runs, uint64_t position, absl::Span<uint8_t> out) const;

  // Tells the kernel we will read [offset, offset+length) soon (readahead).
  void WillNeed(uint64_t offset, uint64_t length) const;

 private:
  ReadOnlyFile(std::string path, int fd, uint64_t size_bytes)
      : path_(std::move(path)), fd_(fd), size_bytes_(size_bytes) {}
  std::string path_;
  int fd_ = -1;
  uint64_t size_bytes_ = 0;
};

// The whole file as text, for small files users hand us (configs, indexes, skeletons).
// InvalidArgument "<path>: N bytes is too large for a <what> (limit M)" past `max_size_bytes`,
// so a weights file passed by mistake is never read into memory whole.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path, uint64_t max_size_bytes,
                                          absl::string_view what);

// Canonical path of `path` (symlinks resolved) if it lies inside one of `roots` (canonical
// folders); PermissionDenied naming the roots otherwise, NotFound when it does not exist.
// This is what keeps a daemon from serving /etc/shadow or ../../ escapes.
absl::StatusOr<std::string> ResolveUnderRoots(const std::string& path, const std::vector<std::string>& roots);

}  // namespace metaload

#endif  // METALOAD_PLANNER_FILE_IO_H_
