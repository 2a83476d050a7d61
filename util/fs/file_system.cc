#include "util/fs/file_system.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "util/fs/confined_open.h"
#include "util/fs/file_io.h"
#include "util/fs/location.h"
#include "util/fs/s3/s3_file_system.h"
#include "util/identifiers.h"
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
  absl::StatusOr<PathKind> KindOf(const std::string& path, bool follow_links) override {
    struct stat st;
    if ((follow_links ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return PathKind::kMissing;
      return ErrnoStatus(errno, absl::StrCat("cannot stat ", path));
    }
    if (S_ISREG(st.st_mode)) return PathKind::kFile;
    if (S_ISDIR(st.st_mode)) return PathKind::kFolder;
    if (S_ISLNK(st.st_mode)) return PathKind::kLink;
    return PathKind::kOther;
  }
  absl::StatusOr<std::vector<std::string>> List(const std::string& path) override {
    std::error_code ec;
    std::vector<std::string> names;
    for (std::filesystem::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      names.push_back(it->path().filename().string());
    }
    if (ec) return ErrnoStatus(ec.value(), absl::StrCat("cannot list ", path));
    std::sort(names.begin(), names.end());
    return names;
  }
  absl::StatusOr<std::string> Canonical(const std::string& path) override {
    return ResolveUnderRoots(path, {"/"});
  }
};

// FileSystem::ByScheme(): each call to the FileSystem of its location's scheme.
class SchemeDispatch final : public FileSystem {
 public:
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override {
    ML_ASSIGN_OR_RETURN(FileSystem * fs, FileSystemFor(path));
    return fs->Open(path);
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenUnderRoots(const std::string& path,
                                                                   const std::vector<std::string>& roots,
                                                                   bool same_device) override {
    ML_ASSIGN_OR_RETURN(FileSystem * fs, FileSystemFor(path));
    return fs->OpenUnderRoots(path, roots, same_device);
  }
  absl::StatusOr<PathKind> KindOf(const std::string& path, bool follow_links) override {
    ML_ASSIGN_OR_RETURN(FileSystem * fs, FileSystemFor(path));
    return fs->KindOf(path, follow_links);
  }
  absl::StatusOr<std::vector<std::string>> List(const std::string& path) override {
    ML_ASSIGN_OR_RETURN(FileSystem * fs, FileSystemFor(path));
    return fs->List(path);
  }
  absl::StatusOr<std::string> Canonical(const std::string& path) override {
    ML_ASSIGN_OR_RETURN(FileSystem * fs, FileSystemFor(path));
    return fs->Canonical(path);
  }
};

struct Registry {
  absl::Mutex mu;
  std::map<std::string, FileSystem*> by_scheme ABSL_GUARDED_BY(mu);
};

// The back ends every process of this build serves, besides POSIX paths: a new one is its file
// (util/fs/NAME_file_system.cc, or a folder of them), one line here and one in
// util/CMakeLists.txt. The in-memory one (memory_file_system.h) is registered by the tests that
// use it.
void RegisterBuiltIns(std::map<std::string, FileSystem*>& by_scheme) {
  by_scheme.emplace("s3", &TheS3FileSystem());  // S3 and S3-compatible stores (docs/object-storage.md)
}

Registry& TheRegistry() {
  static Registry* const registry = [] {  // never destroyed: used until exit
    auto* made = new Registry();
    absl::MutexLock lock(&made->mu);
    RegisterBuiltIns(made->by_scheme);
    return made;
  }();
  return *registry;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenUnderRootsByName(
    FileSystem& file_system, const std::string& path, const std::vector<std::string>& roots) {
  const std::string location = NormalLocation(path);
  for (const std::string& root : roots) {
    if (IsUnderRoot(location, NormalLocation(root))) return file_system.Open(location);
  }
  return absl::PermissionDeniedError(
      absl::StrCat(path, " is not under this daemon's roots [", absl::StrJoin(roots, ", "), "]"));
}

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

FileSystem* FileSystem::ByScheme() {
  static SchemeDispatch* const dispatch = new SchemeDispatch();  // never destroyed: used until exit
  return dispatch;
}

absl::StatusOr<FileSystem*> FileSystemFor(absl::string_view location) {
  const std::string scheme = SchemeOf(location);
  if (scheme.empty()) return FileSystem::Default();
  Registry& registry = TheRegistry();
  absl::MutexLock lock(&registry.mu);
  auto it = registry.by_scheme.find(scheme);
  if (it != registry.by_scheme.end()) return it->second;
  std::vector<std::string> known;
  for (const auto& [name, unused] : registry.by_scheme) known.push_back(absl::StrCat(name, "://"));
  return absl::InvalidArgumentError(absl::StrCat(
      location.substr(0, std::min<size_t>(location.size(), 256)), ": no storage back end for ", scheme,
      ":// locations in this build (",
      known.empty() ? "POSIX paths only" : absl::StrCat("POSIX paths, ", absl::StrJoin(known, ", ")), ")"));
}

bool IsObjectStoreLocation(absl::string_view location) {
  absl::StatusOr<FileSystem*> fs = FileSystemFor(location);
  return fs.ok() && (*fs)->IsObjectStore();
}

absl::Status RegisterFileSystem(const std::string& scheme, FileSystem* file_system) {
  const bool valid = !scheme.empty() && scheme != "file" && absl::ascii_isalpha(scheme.front()) &&
                     std::all_of(scheme.begin(), scheme.end(), [](char c) {
                       return absl::ascii_isalnum(c) || c == '+' || c == '-' || c == '.';
                     });
  if (!valid || file_system == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot register a file system for scheme \"", scheme, "\""));
  }
  Registry& registry = TheRegistry();
  absl::MutexLock lock(&registry.mu);
  if (!registry.by_scheme.emplace(scheme, file_system).second) {
    return absl::InvalidArgumentError(
        absl::StrCat("a file system for ", scheme, ":// is registered already"));
  }
  return absl::OkStatus();
}

}  // namespace metaload
