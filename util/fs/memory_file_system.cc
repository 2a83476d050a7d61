#include "util/fs/memory_file_system.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "util/error_kind.h"
#include "util/fs/location.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

class MemoryFile final : public RandomAccessFile {
 public:
  MemoryFile(std::string location, std::shared_ptr<const MemoryFileSystem::Version> version,
             const MemoryFileSystem* owner)
      : location_(std::move(location)), version_(std::move(version)), owner_(owner) {}

  const std::string& path() const override { return location_; }
  uint64_t size_bytes() const override { return version_->bytes.size(); }
  int64_t mtime_ns() const override { return version_->mtime_ns; }
  absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> out) const override {
    uint64_t end = 0;
    if (__builtin_add_overflow(offset, static_cast<uint64_t>(out.size()), &end) || end > size_bytes()) {
      return absl::OutOfRangeError(absl::StrCat("range [", offset, ", ", offset + out.size(), ") of ",
                                                location_, " passes its size ", size_bytes()));
    }
    if (!out.empty()) std::memcpy(out.data(), version_->bytes.data() + offset, out.size());
    return absl::OkStatus();
  }
  absl::Status ReadRuns(const StridedRuns& runs, uint64_t position, absl::Span<uint8_t> out) const override {
    return ReadRunsOneByOne(*this, runs, position, out);
  }
  void WillNeed(uint64_t, uint64_t) const override {}
  absl::StatusOr<bool> Unchanged() const override {
    std::shared_ptr<const MemoryFileSystem::Version> now = owner_->Current(location_);
    return now != nullptr && now->generation == version_->generation;
  }

 private:
  const std::string location_;
  const std::shared_ptr<const MemoryFileSystem::Version> version_;
  const MemoryFileSystem* const owner_;
};

}  // namespace

void MemoryFileSystem::Put(const std::string& location, std::string bytes, int64_t mtime_ns) {
  absl::MutexLock lock(&mu_);
  auto version = std::make_shared<Version>();
  version->bytes = std::move(bytes);
  version->mtime_ns = mtime_ns;
  version->generation = ++generations_;
  files_[NormalLocation(location)] = std::move(version);
}

bool MemoryFileSystem::Remove(const std::string& location) {
  absl::MutexLock lock(&mu_);
  return files_.erase(NormalLocation(location)) > 0;
}

std::shared_ptr<const MemoryFileSystem::Version> MemoryFileSystem::Current(
    const std::string& normal_location) const {
  absl::MutexLock lock(&mu_);
  auto it = files_.find(normal_location);
  return it == files_.end() ? nullptr : it->second;
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> MemoryFileSystem::Open(const std::string& path) {
  const std::string location = NormalLocation(path);
  if (std::shared_ptr<const Version> version = Current(location)) {
    return std::unique_ptr<RandomAccessFile>(
        std::make_unique<MemoryFile>(location, std::move(version), this));
  }
  absl::StatusOr<PathKind> kind = KindOf(location, true);
  if (kind.ok() && *kind == PathKind::kFolder) {
    return WithErrorKind(absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file")),
                         ErrorKind::kBadInput);
  }
  return absl::NotFoundError(absl::StrCat("cannot open ", path, ": No such file or directory"));
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> MemoryFileSystem::OpenUnderRoots(
    const std::string& path, const std::vector<std::string>& roots, bool /*same_device*/) {
  return OpenUnderRootsByName(*this, path, roots);
}

absl::StatusOr<PathKind> MemoryFileSystem::KindOf(const std::string& path, bool /*follow_links*/) {
  const std::string location = NormalLocation(path);
  absl::MutexLock lock(&mu_);
  if (files_.find(location) != files_.end()) return PathKind::kFile;
  auto after = files_.lower_bound(absl::StrCat(location, "/"));
  if (after != files_.end() && absl::StartsWith(after->first, absl::StrCat(location, "/")))
    return PathKind::kFolder;
  return PathKind::kMissing;
}

absl::StatusOr<std::vector<std::string>> MemoryFileSystem::List(const std::string& path) {
  const std::string prefix = absl::StrCat(NormalLocation(path), "/");
  std::vector<std::string> names;
  absl::MutexLock lock(&mu_);
  for (auto it = files_.lower_bound(prefix); it != files_.end() && absl::StartsWith(it->first, prefix);
       ++it) {
    const std::string rest = it->first.substr(prefix.size());
    const std::string name = rest.substr(0, rest.find('/'));
    if (names.empty() || names.back() != name) names.push_back(name);
  }
  if (names.empty()) return absl::NotFoundError(absl::StrCat("cannot list ", path, ": no such folder"));
  return names;
}

absl::StatusOr<std::string> MemoryFileSystem::Canonical(const std::string& path) {
  const std::string location = NormalLocation(path);
  ML_ASSIGN_OR_RETURN(PathKind kind, KindOf(location, true));
  if (kind == PathKind::kMissing)
    return absl::NotFoundError(absl::StrCat("cannot resolve ", path, ": no such file or folder"));
  return location;
}

MemoryFileSystem& RegisteredMemoryFileSystem() {
  static MemoryFileSystem* const memory = [] {
    auto* made = new MemoryFileSystem();  // lives until exit, as a back end must
    if (absl::Status registered = RegisterFileSystem("mem", made); !registered.ok()) {
      std::fprintf(stderr, "%s\n", std::string(registered.message()).c_str());
      std::abort();
    }
    return made;
  }();
  return *memory;
}

}  // namespace metaload
