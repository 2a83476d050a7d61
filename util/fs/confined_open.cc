#include "util/fs/confined_open.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "util/identifiers.h"

namespace metaload {
namespace {

constexpr int kFileFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW;

// -1 unknown, 0 no (ENOSYS, or seccomp said so), 1 yes.
std::atomic<int> has_openat2{-1};

int Openat2(int dir_fd, const std::string& relative) {
  open_how how{};
  how.flags = kFileFlags;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
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

absl::StatusOr<ReadOnlyFile> OpenUnderRoots(const std::string& path, const std::vector<std::string>& roots) {
  absl::StatusOr<std::string> canonical = ResolveUnderRoots(path, roots);
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
  int fd = ConfinedOpenUsesOpenat2() ? Openat2(root_fd, relative) : WalkNoFollow(root_fd, relative);
  const int err = errno;
  ::close(root_fd);
  if (fd < 0) {
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
