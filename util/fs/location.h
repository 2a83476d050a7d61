// Where a checkpoint lives, as a string: a POSIX path ("/models/llama", "ckpt/model.safetensors")
// or "scheme://rest" ("mem://bucket/llama"), and the path arithmetic on it that readers need
// (join, parent, name, normal form) done the same way for every scheme, so that no reader
// spells a location with std::filesystem, which knows POSIX paths only.
//
//   const std::string dir = NormalLocation("mem://bucket/llama/");   // "mem://bucket/llama"
//   const std::string index = JoinLocation(dir, "model.safetensors.index.json");
//
// Thread-safety: pure functions.
#ifndef METALOAD_UTIL_FS_LOCATION_H_
#define METALOAD_UTIL_FS_LOCATION_H_

#include <string>

#include "absl/strings/string_view.h"

namespace metaload {

// "mem" for "mem://x", "" for a POSIX path (one without "://" after a scheme's characters).
std::string SchemeOf(absl::string_view location);
// A location that names one place wherever it is read: "scheme://..." or a POSIX path from '/'.
// What a daemon takes from a client (a registration's folder, its roots): a relative path would
// mean the daemon's working folder, not the sender's.
bool IsAbsoluteLocation(absl::string_view location);
// The location lexically normal ("." and ".." folded, no doubled or trailing '/') and, for a
// POSIX path, absolute against the working folder: two spellings of one place compare equal.
std::string NormalLocation(absl::string_view location);
// `name` inside folder `dir` ("dir/name"); `name` absolute or with a scheme is returned as is.
std::string JoinLocation(absl::string_view dir, absl::string_view name);
// The folder holding `location` ("mem://b/x/f" -> "mem://b/x"; "f" -> "."; "/" -> "/").
std::string ParentOf(absl::string_view location);
// The last component ("mem://b/x/f" -> "f"; "/a/b/" -> "b").
std::string BaseNameOf(absl::string_view location);

}  // namespace metaload

#endif  // METALOAD_UTIL_FS_LOCATION_H_
