#include "util/fs/location.h"

#include <filesystem>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace metaload {
namespace {

struct Split {
  std::string scheme;      // "" for POSIX
  absl::string_view rest;  // after "scheme://"
};

Split SplitLocation(absl::string_view location) {
  const size_t marker = location.find("://");
  if (marker == absl::string_view::npos || marker == 0) return {"", location};
  for (char c : location.substr(0, marker)) {
    if (!absl::ascii_isalnum(c) && c != '+' && c != '-' && c != '.') return {"", location};
  }
  return {std::string(location.substr(0, marker)), location.substr(marker + 3)};
}

// "a/./b//c/../d/" -> "a/b/d"; ".." past the top is dropped (a scheme's root has no parent).
std::string NormalRest(absl::string_view rest) {
  std::vector<absl::string_view> parts;
  for (absl::string_view part : absl::StrSplit(rest, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(part);
  }
  return absl::StrJoin(parts, "/");
}

}  // namespace

std::string SchemeOf(absl::string_view location) { return SplitLocation(location).scheme; }

bool IsAbsoluteLocation(absl::string_view location) {
  return !SplitLocation(location).scheme.empty() || (!location.empty() && location.front() == '/');
}

std::string NormalLocation(absl::string_view location) {
  const Split split = SplitLocation(location);
  if (!split.scheme.empty()) return split.scheme + "://" + NormalRest(split.rest);
  std::filesystem::path normal = std::filesystem::absolute(std::string(location)).lexically_normal();
  if (!normal.has_filename() && normal != normal.root_path()) normal = normal.parent_path();
  return normal.string();
}

std::string JoinLocation(absl::string_view dir, absl::string_view name) {
  if (!SplitLocation(name).scheme.empty() || (!name.empty() && name.front() == '/')) return std::string(name);
  if (dir.empty()) return std::string(name);
  if (dir.back() == '/') return std::string(dir) + std::string(name);
  return std::string(dir) + "/" + std::string(name);
}

std::string ParentOf(absl::string_view location) {
  const Split split = SplitLocation(location);
  if (split.scheme.empty()) {
    const std::filesystem::path parent = std::filesystem::path(std::string(location)).parent_path();
    return parent.empty() ? "." : parent.string();
  }
  std::string rest = NormalRest(split.rest);
  const size_t slash = rest.rfind('/');
  return split.scheme + "://" + (slash == std::string::npos ? "" : rest.substr(0, slash));
}

std::string BaseNameOf(absl::string_view location) {
  const Split split = SplitLocation(location);
  const std::string rest = split.scheme.empty() ? std::string(location) : NormalRest(split.rest);
  absl::string_view trimmed = rest;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.remove_suffix(1);
  const size_t slash = trimmed.rfind('/');
  return std::string(slash == absl::string_view::npos ? trimmed : trimmed.substr(slash + 1));
}

}  // namespace metaload
