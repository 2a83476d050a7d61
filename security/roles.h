// Roles (issue 23): what an authenticated caller may do. Credentials map to roles, not to
// everything: a rank's token reads, a daemon's joins and publishes, an operator's registers.
//   reader  GetPlan, GetLayout, ReadRange, GetStatus (what ranks need)
//   member  reader's calls + Join, PublishModel, leaving (what node agents need)
//   admin   reader's calls + RegisterModel, UnregisterModel, --replace, releasing a node name
// A member reads because agents forward plans and fetch layouts on their ranks' behalf.
//
//   RoleSet roles = RolesOfCertificate("node-b", patterns);
//   if (!Has(roles, Role::kAdmin)) ...
#ifndef METALOAD_SECURITY_ROLES_H_
#define METALOAD_SECURITY_ROLES_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace metaload {

enum class Role : uint8_t { kReader = 1, kMember = 2, kAdmin = 4 };

// A set of roles, as bits of Role. A member or an admin is always a reader too.
using RoleSet = uint8_t;
inline constexpr RoleSet kNoRoles = 0;
inline constexpr RoleSet kAllRoles = 7;

inline constexpr RoleSet Bit(Role role) { return static_cast<RoleSet>(role); }
// `role` with what it implies (member and admin read).
RoleSet Grant(Role role);
inline bool Has(RoleSet roles, Role role) { return (roles & static_cast<uint8_t>(role)) != 0; }
// "reader", "member", "admin".
const char* RoleName(Role role);
// "reader, member", "no role"; with `joiner` "or": "member or admin".
std::string DescribeRoles(RoleSet roles, const char* joiner = ", ");
// Role by its name as the node config spells it; false for another word.
bool ParseRole(absl::string_view name, Role* role);

// Which certificate names hold a role under mutual TLS (node config `tls.roles`): shell-style
// patterns (fnmatch: `*`, `?`, `[...]`) matched against the certificate's name.
struct CertificateRoles {
  bool configured = false;  // false: every certificate the client CA signed holds every role
  std::vector<std::pair<std::string, Role>> patterns;
};
RoleSet RolesOfCertificate(absl::string_view name, const CertificateRoles& roles);

}  // namespace metaload

#endif  // METALOAD_SECURITY_ROLES_H_
