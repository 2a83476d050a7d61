#include "util/fs/file_system.h"

#include <utility>

#include "util/fs/confined_open.h"
#include "util/fs/file_io.h"

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
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenUnderRoots(
      const std::string& path, const std::vector<std::string>& roots) override {
    return Owned(metaload::OpenUnderRoots(path, roots));
  }
};

}  // namespace

FileSystem* FileSystem::Default() {
  static PosixFileSystem* const posix = new PosixFileSystem();  // never destroyed: used until exit
  return posix;
}

}  // namespace metaload
