#include "security/roles.h"

#include <fnmatch.h>

#include "absl/strings/str_join.h"

namespace metaload {
namespace {

struct NamedRole {
  Role role;
  const char* name;
};
constexpr NamedRole kRoles[] = {
    {Role::kReader, "reader"}, {Role::kMember, "member"}, {Role::kAdmin, "admin"}};

}  // namespace

RoleSet Grant(Role role) { return Bit(role) | Bit(Role::kReader); }

const char* RoleName(Role role) {
  for (const NamedRole& r : kRoles) {
    if (r.role == role) return r.name;
  }
  return "?";
}

std::string DescribeRoles(RoleSet roles, const char* joiner) {
  std::vector<const char*> names;
  for (const NamedRole& r : kRoles) {
    if (Has(roles, r.role)) names.push_back(r.name);
  }
  return names.empty() ? "no role" : absl::StrJoin(names, joiner);
}

bool ParseRole(absl::string_view name, Role* role) {
  for (const NamedRole& r : kRoles) {
    if (name == r.name) {
      *role = r.role;
      return true;
    }
  }
  return false;
}

RoleSet RolesOfCertificate(absl::string_view name, const CertificateRoles& roles) {
  if (!roles.configured) return kAllRoles;
  const std::string subject(name);
  RoleSet out = kNoRoles;
  for (const auto& [pattern, role] : roles.patterns) {
    if (fnmatch(pattern.c_str(), subject.c_str(), 0) == 0) out |= Grant(role);
  }
  return out;
}

}  // namespace metaload
