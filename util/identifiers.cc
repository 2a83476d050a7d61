#include "util/identifiers.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "util/fs/location.h"

namespace metaload {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view value, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", QuoteForMessage(value), " ", why));
}

bool IsHostChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
}

// Components of a path without its leading '/': none may be empty, "." or "..".
absl::Status CheckComponents(absl::string_view field, absl::string_view full, absl::string_view rest) {
  for (absl::string_view part : absl::StrSplit(rest, '/')) {
    if (part.empty()) return Bad(field, full, "has an empty component ('//' or a trailing '/')");
    if (part == "." || part == "..") return Bad(field, full, "has a '.' or '..' component");
  }
  return absl::OkStatus();
}

}  // namespace

std::string QuoteForMessage(absl::string_view text, size_t max_bytes) {
  std::string out = "\"";
  const absl::string_view shown = text.substr(0, max_bytes);
  for (char c : shown) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      absl::StrAppend(&out, "\\", std::string(1, c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (u < 0x20 || u >= 0x7f) {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", u));
    } else {
      out += c;
    }
  }
  out += "\"";
  if (shown.size() < text.size()) absl::StrAppend(&out, "… (", text.size(), " bytes)");
  return out;
}

absl::Status CheckName(absl::string_view field, absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) {
    return Bad(field, name, absl::StrCat("must have 1 to ", kMaxNameBytes, " characters"));
  }
  if (name[0] == '.') return Bad(field, name, "must not start with '.'");
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return Bad(field, name, "may hold only letters, digits, '-', '_' and '.'");
    }
  }
  return absl::OkStatus();
}

namespace {

absl::Status CheckIdentityText(absl::string_view field, absl::string_view text, size_t max_bytes) {
  if (text.empty() || text.size() > max_bytes) {
    return Bad(field, text, absl::StrCat("must have 1 to ", max_bytes, " characters"));
  }
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u <= ' ' || u >= 127 || c == '"' || c == '\\') {
      return Bad(field, text, "may hold only printable ASCII characters other than space, '\"' and '\\'");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckIdentity(absl::string_view field, absl::string_view identity) {
  return CheckIdentityText(field, identity, kMaxIdentityBytes);
}

absl::Status CheckIdentityName(absl::string_view field, absl::string_view name) {
  return CheckIdentityText(field, name, kMaxIdentityNameBytes);
}

absl::Status CheckAddress(absl::string_view field, absl::string_view address, bool allow_port_zero) {
  if (address.size() > kMaxHostBytes + 8) return Bad(field, address, "is too long for host:port");
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0 || colon + 1 == address.size()) {
    return Bad(field, address, "is not host:port");
  }
  const absl::string_view host = address.substr(0, colon);
  const absl::string_view port_text = address.substr(colon + 1);
  int port = -1;
  if (port_text.size() > 5 || !absl::SimpleAtoi(port_text, &port) || !absl::ascii_isdigit(port_text[0]) ||
      port < (allow_port_zero ? 0 : 1) || port > 65535) {
    return Bad(field, address, absl::StrCat("has a bad port (", allow_port_zero ? 0 : 1, "..65535)"));
  }
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return Bad(field, address, "has an unclosed IPv6 '['");
    for (char c : host.substr(1, host.size() - 2)) {
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') {
        return Bad(field, address, "has a bad IPv6 address");
      }
    }
    return absl::OkStatus();
  }
  for (char c : host) {
    if (!IsHostChar(c)) return Bad(field, address, "has a host that is not a name or IP address");
  }
  return absl::OkStatus();
}

absl::Status CheckNormalAbsolutePath(absl::string_view field, absl::string_view path) {
  if (path.empty() || path.size() > kMaxPathBytes) {
    return Bad(field, path, absl::StrCat("must have 1 to ", kMaxPathBytes, " bytes"));
  }
  if (path.find('\0') != absl::string_view::npos) return Bad(field, path, "holds a NUL byte");
  if (path[0] != '/') return Bad(field, path, "must be an absolute path");
  if (path == "/") return absl::OkStatus();
  return CheckComponents(field, path, path.substr(1));
}

absl::Status CheckNormalLocation(absl::string_view field, absl::string_view location) {
  const std::string scheme = SchemeOf(location);
  if (scheme.empty()) return CheckNormalAbsolutePath(field, location);
  if (location.size() > kMaxPathBytes)
    return Bad(field, location, absl::StrCat("must have 1 to ", kMaxPathBytes, " bytes"));
  if (location.find('\0') != absl::string_view::npos) return Bad(field, location, "holds a NUL byte");
  const absl::string_view rest = location.substr(scheme.size() + 3);
  if (rest.empty()) return Bad(field, location, "names no bucket or folder after the scheme");
  return CheckComponents(field, location, rest);
}

absl::Status CheckNormalRelativePath(absl::string_view field, absl::string_view path) {
  if (path.empty() || path.size() > kMaxPathBytes) {
    return Bad(field, path, absl::StrCat("must have 1 to ", kMaxPathBytes, " bytes"));
  }
  if (path.find('\0') != absl::string_view::npos) return Bad(field, path, "holds a NUL byte");
  if (path[0] == '/') return Bad(field, path, "must be relative to the checkpoint folder");
  return CheckComponents(field, path, path);
}

bool IsUnderRoot(absl::string_view path, absl::string_view root) {
  if (root == "/") return absl::StartsWith(path, "/");
  return path == root || (absl::StartsWith(path, root) && path[root.size()] == '/');
}

}  // namespace metaload
