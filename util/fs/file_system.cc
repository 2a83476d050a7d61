#include "util/fs/file_system.h"

#include <algorithm>
#include <utility>

#include "util/fs/confined_open.h"
#include "util/fs/file_io.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

absl::StatusOr<std::unique_ptr<RandomAccessFile>> Owned(absl::StatusOr<ReadOnlyFile> file) {
  if (!file.ok()) return file.status();
  return std::unique_ptr<RandomAccessFile>(std::make_unique<ReadOnlyFile>(*std::move(file)));
}

class PosixFileSystem final : public FileSystem {
 public:
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override {
    return Owned(ReadOnlyFile::Open(path));
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenUnderRoots(const std::string& path,
                                                                   const std::vector<std::string>& roots,
                                                                   bool same_device) override {
    return Owned(metaload::OpenUnderRoots(path, roots, {same_device}));
  }
};

}  // namespace

absl::Status ReadRunsOneByOne(const RandomAccessFile& file, const StridedRuns& runs, uint64_t position,
                              absl::Span<uint8_t> out) {
  size_t done = 0;
  while (done < out.size()) {
    const uint64_t at = position + done;
    const uint64_t run = at / runs.run_bytes, into = at % runs.run_bytes;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(runs.run_bytes - into, out.size() - done));
    // run < run_count, so this offset is at most the runs' last byte, checked by ReadAt.
    ML_RETURN_IF_ERROR(file.ReadAt(runs.first_offset + run * runs.stride_bytes + into, out.subspan(done, n)));
    done += n;
  }
  return absl::OkStatus();
}

FileSystem* FileSystem::Default() {
  static PosixFileSystem* const posix = new PosixFileSystem();  // never destroyed: used until exit
  return posix;
}

}  // namespace metaload
