#include "util/fs/confined_open.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "util/identifiers.h"

namespace metaload {
namespace {

constexpr int kFileFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW;

// -1 unknown, 0 no (ENOSYS, or seccomp said so), 1 yes.
std::atomic<int> has_openat2{-1};

int Openat2(int dir_fd, const std::string& relative, bool same_mount = false) {
  open_how how{};
  how.flags = kFileFlags;
  how.resolve =
      RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | (same_mount ? RESOLVE_NO_XDEV : 0);
  return static_cast<int>(::syscall(SYS_openat2, dir_fd, relative.c_str(), &how, sizeof(how)));
}

// One openat per component, none of which may be a symlink.
int WalkNoFollow(int root_fd, const std::string& relative) {
  std::vector<std::string> parts = absl::StrSplit(relative, '/', absl::SkipEmpty());
  int dir = ::dup(root_fd);
  if (dir < 0) return -1;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (parts[i] == "..") {  // a canonical path has none; refuse rather than climb
      ::close(dir);
      errno = EXDEV;
      return -1;
    }
    int next = ::openat(dir, parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int err = errno;
    ::close(dir);
    if (next < 0) {
      errno = err;
      return -1;
    }
    dir = next;
  }
  int fd = parts.empty() ? (errno = EISDIR, -1) : ::openat(dir, parts.back().c_str(), kFileFlags);
  const int err = errno;
  ::close(dir);
  errno = err;
  return fd;
}

constexpr char kSameDeviceRule[] = "same_device: true refuses files on another mount than their root's";

// same_device's checks on the opened file: the walk (no openat2) cannot refuse a mount point
// on the way, but a file of another file system still shows in its device. A hard link shows
// only in its count: its other name may be anywhere on the device, outside the root too.
absl::Status CheckSameDevice(int root_fd, int fd, const std::string& path, const std::string& root) {
  struct stat root_info, info;
  if (::fstat(root_fd, &root_info) != 0) return ErrnoStatus(errno, absl::StrCat("cannot stat root ", root));
  if (::fstat(fd, &info) != 0)
    return ErrnoStatus(errno, absl::StrCat("cannot stat ", QuoteForMessage(path, 512)));
  if (info.st_dev != root_info.st_dev) {
    return absl::PermissionDeniedError(absl::StrCat(QuoteForMessage(path, 512),
                                                    " is on another file system than root ", root, " (",
                                                    kSameDeviceRule, ")"));
  }
  if (info.st_nlink > 1) {
    return absl::PermissionDeniedError(absl::StrCat(
        QuoteForMessage(path, 512), " has ", info.st_nlink, " hard links (same_device: true refuses ",
        "hard-linked files: another name of the file may lie outside root ", root, ")"));
  }
  return absl::OkStatus();
}

// `path`, spelled without "." or "..", lies under a root, yet its canonical form does not: a
// symlink on the way (the file's or a folder's) points elsewhere.
bool LeadsOutThroughASymlink(const std::string& path, const std::vector<std::string>& roots) {
  if (!CheckNormalAbsolutePath("path", path).ok()) return false;
  for (const std::string& root : roots) {
    if (IsUnderRoot(path, root)) return true;
  }
  return false;
}

// `path` (spelled under a root, without "." or "..") does not resolve, and the first symlink on
// the way, read as written, points out of the roots: a dangling link out of the roots must be
// refused as one that resolves is, or the two errors tell whether a path outside exists.
bool DanglesOutOfRoots(const std::string& path, const std::vector<std::string>& roots) {
  if (!LeadsOutThroughASymlink(path, roots)) return false;
  std::string prefix;
  for (absl::string_view part : absl::StrSplit(path.substr(1), '/')) {
    const std::string parent = prefix.empty() ? "/" : prefix;
    absl::StrAppend(&prefix, "/", part);
    struct stat info;
    if (::lstat(prefix.c_str(), &info) != 0) return false;  // missing itself: not found, honestly
    if (!S_ISLNK(info.st_mode)) continue;
    char target[PATH_MAX];
    const ssize_t length = ::readlink(prefix.c_str(), target, sizeof(target) - 1);
    if (length <= 0) return true;
    std::string to(target, static_cast<size_t>(length));
    if (to[0] != '/') to = absl::StrCat(parent == "/" ? "" : parent, "/", to);
    // Lexically, as the kernel would start resolving it.
    const std::string lexical = std::filesystem::path(to).lexically_normal().string();
    for (const std::string& root : roots) {
      if (IsUnderRoot(lexical, root)) return false;  // a link within the roots that dangles
    }
    return true;
  }
  return false;
}

}  // namespace

bool ConfinedOpenUsesOpenat2() {
  if (has_openat2.load() < 0) {
    int fd = Openat2(AT_FDCWD, ".");  // this process's working folder, always beneath itself
    const int err = errno;
    if (fd >= 0) ::close(fd);
    has_openat2.store(fd >= 0 || (err != ENOSYS && err != EPERM) ? 1 : 0);
  }
  return has_openat2.load() == 1;
}

void ConfinedOpenForceWalkForTests(bool walk) { has_openat2.store(walk ? 0 : -1); }

absl::StatusOr<ReadOnlyFile> OpenUnderRoots(const std::string& path, const std::vector<std::string>& roots,
                                            ConfineOptions options) {
  absl::StatusOr<std::string> canonical = ResolveUnderRoots(path, roots);
  if ((absl::IsPermissionDenied(canonical.status()) && LeadsOutThroughASymlink(path, roots)) ||
      (absl::IsNotFound(canonical.status()) && DanglesOutOfRoots(path, roots))) {
    return absl::PermissionDeniedError(absl::StrCat(
        QuoteForMessage(path, 512), " leads out of this daemon's roots [", absl::StrJoin(roots, ", "),
        "] through a symbolic link (refused: metad opens only files beneath its roots)"));
  }
  if (!canonical.ok()) return canonical.status();
  const std::string* root = nullptr;
  for (const std::string& r : roots) {
    if (IsUnderRoot(*canonical, r) && (root == nullptr || r.size() > root->size())) root = &r;
  }
  if (root == nullptr || canonical->size() <= root->size() + (*root == "/" ? 0 : 1)) {
    return absl::PermissionDeniedError(
        absl::StrCat(QuoteForMessage(path, 512), " is not a file under a root"));
  }
  const std::string relative = canonical->substr(*root == "/" ? 1 : root->size() + 1);
  const int root_fd = ::open(root->c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open root ", *root));
  const bool openat2 = ConfinedOpenUsesOpenat2();
  int fd = openat2 ? Openat2(root_fd, relative, options.same_device) : WalkNoFollow(root_fd, relative);
  const int err = errno;
  if (fd >= 0 && options.same_device) {
    if (absl::Status same = CheckSameDevice(root_fd, fd, path, *root); !same.ok()) {
      ::close(fd);
      ::close(root_fd);
      return same;
    }
  }
  ::close(root_fd);
  if (fd < 0) {
    // A canonical path holds no "..", so openat2 says EXDEV under RESOLVE_NO_XDEV only for a
    // mount point on the way.
    if (err == EXDEV && openat2 && options.same_device) {
      return absl::PermissionDeniedError(absl::StrCat(QuoteForMessage(path, 512),
                                                      " lies across a mount point below root ", *root, " (",
                                                      kSameDeviceRule, ")"));
    }
    if (err == ELOOP || err == EXDEV || err == ENOTDIR) {
      return absl::PermissionDeniedError(absl::StrCat(
          QuoteForMessage(path, 512), " changed while it was opened: a part of it is now a symbolic ",
          "link or not a folder (refused: it could lead outside root ", *root, ")"));
    }
    return ErrnoStatus(err, absl::StrCat("cannot open ", *canonical));
  }
  return ReadOnlyFile::FromDescriptor(fd, *canonical);
}

}  // namespace metaload
