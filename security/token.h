// Bearer tokens: every RPC to a daemon configured with `auth_token_file` carries
// `authorization: Bearer <token>`. The token is read from a file (never a flag: flags show in
// `ps`), and is never printed.
#ifndef METALOAD_SECURITY_TOKEN_H_
#define METALOAD_SECURITY_TOKEN_H_

#include <array>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace metaload {

inline constexpr size_t kMaxTokenBytes = 4096;
inline constexpr char kAuthorizationHeader[] = "authorization";
inline constexpr char kBearerPrefix[] = "Bearer ";

// The token in `path`: its content with trailing whitespace (the newline editors add)
// removed. InvalidArgument naming `what` and the path (never the content) when the file is
// missing, empty, longer than kMaxTokenBytes, or holds bytes outside printable ASCII (an HTTP/2
// header value could not carry them).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path, absl::string_view what);

// Whether the `authorization` header value `header` is "Bearer " + `token`, in time that does
// not depend on where they differ (both are hashed first, so not on their lengths either).
bool BearerMatches(absl::string_view header, absl::string_view token);

// The same compare in two halves, for a daemon that accepts many tokens: each token's digest
// is taken once, at start (TokenDigest), and each call's header once (HeaderDigest); equal
// digests compare in constant time (SameDigest).
using BearerDigest = std::array<unsigned char, 32>;
BearerDigest TokenDigest(absl::string_view token);    // of "Bearer " + token
BearerDigest HeaderDigest(absl::string_view header);  // of the header value as sent
bool SameDigest(const BearerDigest& a, const BearerDigest& b);

}  // namespace metaload

#endif  // METALOAD_SECURITY_TOKEN_H_
