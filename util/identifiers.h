// Names, addresses and paths that arrive from outside (RPC fields, config keys), checked once
// at the edge, and a safe way to echo untrusted text back in an error or a log line.
//
//   ML_RETURN_IF_ERROR(CheckName("node name", request.node().name()));
//   return absl::NotFoundError(absl::StrCat("no model ", QuoteForMessage(name)));
//
// Every check bounds the length first, so nothing downstream sees a 60 MB "name".
#ifndef METALOAD_UTIL_IDENTIFIERS_H_
#define METALOAD_UTIL_IDENTIFIERS_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace metaload {

inline constexpr size_t kMaxNameBytes = 128;
inline constexpr size_t kMaxPathBytes = 4096;
inline constexpr size_t kMaxHostBytes = 253;  // a DNS name

// `text` in double quotes, at most `max_bytes` of it (then "…" and the full size), with
// control characters and non-ASCII bytes escaped (\n, \x1b): a newline in a name cannot forge
// a log line, and a huge field cannot grow a message.
std::string QuoteForMessage(absl::string_view text, size_t max_bytes = 96);

// A model or node name: 1 to 128 of letters, digits, '-', '_' and '.', not starting with '.'.
// InvalidArgument naming `field`.
absl::Status CheckName(absl::string_view field, absl::string_view name);

// Who a caller is, as logs name it and member bindings keep it (security/server_security.h,
// state_dir/members/<node>.id): "token:member:node-b.token", "cert:node-b", "token",
// "anonymous". One word of printable ASCII, with no space, '"' or '\\': one token in a log line,
// one line in a file, read back exactly as written, never equal to a quoted or escaped other.
inline constexpr size_t kMaxIdentityBytes = 512;
// What names one holder inside an identity: a token file's name (at most 255 bytes anyway), a
// certificate's name (tls.node_certificate's 256 bytes with a node name for {node}).
inline constexpr size_t kMaxIdentityNameBytes = 384;

// An identity: 1 to kMaxIdentityBytes of printable ASCII other than space, '"' and '\\'.
// InvalidArgument naming `field`.
absl::Status CheckIdentity(absl::string_view field, absl::string_view identity);
// The same characters, 1 to kMaxIdentityNameBytes of them.
absl::Status CheckIdentityName(absl::string_view field, absl::string_view name);

// The identities every holder of a credential shares: auth_token_file's one token, and no
// credential at all. Bindings and per-client caps cannot tell their holders apart
// (docs/security.md); every other identity ("cert:...", "token:<role>:<file>") names one holder.
inline constexpr char kSharedTokenIdentity[] = "token";
inline constexpr char kAnonymousIdentity[] = "anonymous";
inline bool IsSharedIdentity(absl::string_view identity) {
  return identity == kSharedTokenIdentity || identity == kAnonymousIdentity;
}

// "host:port" that someone can dial: host a DNS name or IPv4 address (letters, digits, '-',
// '.', '_'), or an IPv6 address in brackets; port 1..65535 (or 0..65535 with
// `allow_port_zero`, for a listen address). InvalidArgument naming `field`.
absl::Status CheckAddress(absl::string_view field, absl::string_view address, bool allow_port_zero = false);

// An absolute path in normal form: starts with '/', no empty, "." or ".." component, no
// trailing '/' (except "/" itself), no NUL, at most kMaxPathBytes. Prefix comparisons between
// such paths on a '/' boundary are exact (IsUnderRoot).
absl::Status CheckNormalAbsolutePath(absl::string_view field, absl::string_view path);

// CheckNormalAbsolutePath's rules for a POSIX path; for "scheme://rest" (util/fs/location.h) a
// non-empty `rest` of normal components (no empty, "." or ".." one, no trailing '/'), so that
// prefix comparisons between locations of one scheme are exact too. What a member publishes
// (its roots) and a record holds (its checkpoint folder), on any storage back end.
absl::Status CheckNormalLocation(absl::string_view field, absl::string_view location);

// A file name relative to a checkpoint folder in normal form: not absolute, no empty, "." or
// ".." component, no NUL, at most kMaxPathBytes. It cannot name anything outside the folder.
absl::Status CheckNormalRelativePath(absl::string_view field, absl::string_view path);

// True when `path` is `root` or lies below it. REQUIRES: both in normal absolute form.
bool IsUnderRoot(absl::string_view path, absl::string_view root);

}  // namespace metaload

#endif  // METALOAD_UTIL_IDENTIFIERS_H_
