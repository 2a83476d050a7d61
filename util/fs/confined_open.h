// Opening a file under one of a daemon's roots without a window between the check and the
// open (issue 13): ResolveUnderRoots (file_io.h) resolves the path and checks it against the
// roots, but a local user who can write inside a root could swap a directory on that path for a
// symlink to /etc between the check and a plain open(2), and be served /etc/passwd. Here the
// file is opened relative to its root's directory, by the canonical path the check found, with
// no symlink allowed on the way: openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) where the
// kernel has it (5.6+), else one O_NOFOLLOW openat per component. A path whose components
// changed into symlinks since it was resolved is refused, never followed. Registration opens the
// safetensors headers, the index and config.json this way too (issue 23), so a symlink that leads
// out of the roots is refused wherever it is met.
//
// Hard links and bind mounts are not symlinks: a hard link inside a root to a file outside it,
// or a folder bind-mounted into a root, is opened like any file of the root. On shared hosts,
// ConfineOptions::same_device (node config `same_device: true`) refuses both: a file on another
// mount than its root's (openat2's RESOLVE_NO_XDEV, and the device of the file against the
// root's), or with more than one link.
//
//   ML_ASSIGN_OR_RETURN(ReadOnlyFile file, OpenUnderRoots(request.path(), config.roots));
#ifndef METALOAD_UTIL_CONFINED_OPEN_H_
#define METALOAD_UTIL_CONFINED_OPEN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "util/fs/file_io.h"

namespace metaload {

struct ConfineOptions {
  // Refuse a file reached through a mount point below its root (a bind mount), on another file
  // system than its root's, or with more than one hard link. Default false: a root may span mounts.
  bool same_device = false;
};

// `roots` canonical (symlinks resolved). PermissionDenied naming the path when it is not under a
// root ("... leads out of this daemon's roots [...] through a symbolic link" when it is spelled
// under one, never saying where the link leads), or when a component of it became a symlink (or the file
// moved) after it was resolved, or, with `same_device`, when it is on another mount or hard-linked; otherwise
// ResolveUnderRoots' and ReadOnlyFile::Open's errors.
absl::StatusOr<ReadOnlyFile> OpenUnderRoots(const std::string& path, const std::vector<std::string>& roots,
                                            ConfineOptions options = {});

// For tests: whether this process uses openat2 (false: the component-by-component walk), and
// forcing the walk, as on a kernel without openat2.
bool ConfinedOpenUsesOpenat2();
void ConfinedOpenForceWalkForTests(bool walk);

}  // namespace metaload

#endif  // METALOAD_UTIL_CONFINED_OPEN_H_
