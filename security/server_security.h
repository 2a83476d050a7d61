// A daemon's side of security/client_credentials.h: the credentials its gRPC port listens
// with (TLS; with `client_ca`, mutual TLS), the tokens a call may carry and the roles each
// grants (security/roles.h), who a caller is and what it may do, and the credentials the
// daemon itself dials its coordinator with (its certificate and its member token:
// daemon-to-daemon calls pass the same checks as any client's).
#ifndef METALOAD_SECURITY_SERVER_SECURITY_H_
#define METALOAD_SECURITY_SERVER_SECURITY_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "security/client_credentials.h"
#include "security/roles.h"
#include "security/token.h"

namespace metaload {

// Paths from the node config (daemon/config/node_config.h); empty: not set.
struct ServerSecurityFiles {
  std::string cert, key;   // TLS on the port when set (both or neither)
  std::string client_ca;   // mutual TLS: callers must present a certificate it signed
  std::string ca;          // verifies the daemons this one dials; default client_ca
  std::string token_file;  // `auth_token_file`: one token with every role
  // `auth_tokens`: (role name, path) pairs, each file one token with that role. Excludes
  // token_file. This daemon dials with the first member token, and with the first admin token
  // when it forwards an admin's call (a node agent).
  std::vector<std::pair<std::string, std::string>> role_token_files;
  CertificateRoles certificate_roles;       // `tls.roles`, under client_ca
  std::string node_certificate = "{node}";  // `tls.node_certificate`
  std::string source;                       // "node.yaml", for messages
};

// A token this daemon accepts: what it grants and how a caller holding it is named in logs and
// member entries ("token" for auth_token_file, "token:member:node-b.token": the file's name,
// never the token).
struct AcceptedToken {
  std::string token;
  RoleSet roles = kNoRoles;
  std::string identity;
  BearerDigest digest = {};  // TokenDigest(token), taken once: calls are compared against it
};

struct ServerSecurity {
  std::shared_ptr<grpc::ServerCredentials> credentials;  // insecure unless TLS
  bool tls = false;
  bool mutual = false;
  std::vector<AcceptedToken> tokens;  // empty: calls need no token
  CertificateRoles certificate_roles;
  std::string node_certificate = "{node}";
  ClientCredentials as_client;  // for calls this daemon makes to others (its member token)
  // For admin calls a node agent forwards (--replace, unregister): the admin token; without one
  // as_client's (the coordinator then decides by the certificate's roles).
  ClientCredentials as_admin;
  bool tokens_required() const { return !tokens.empty(); }
  // "TLS, client certificates required, tokens for reader, member, admin"
  std::string Describe() const;
  // What the start-up log says of who holds which role: "one token holds every role
  // (auth_token_file)", "every client certificate holds every role (tls.roles is not set)".
  std::vector<std::string> RoleNotes() const;
};

// Who called and what it may do.
struct CallerAuth {
  RoleSet roles = kNoRoles;
  // For logs and for binding a member's entry to its owner: CertificateIdentity under mutual
  // TLS, else the token's identity, else "anonymous".
  std::string identity;
  std::string certificate_name;  // mutual TLS: CertificateName; empty when it names no one
  bool certificate = false;      // mutual TLS: it presented a certificate the client CA signed
};

// The name a client certificate goes by: its first non-empty common name, else its first
// non-empty subject alternative name; empty when it has neither (it names no one).
std::string CertificateName(const std::vector<std::string>& common_names,
                            const std::vector<std::string>& alternative_names);
// "cert:<name>" for a name usable as an identity (util/identifiers.h CheckIdentityName); for
// any other (empty, spaces, control bytes) "cert:" and the name quoted, which no usable name
// equals: such a certificate is logged as what it is and never becomes a member.
std::string CertificateIdentity(const std::string& name);

// Reads and checks the files; InvalidArgument naming the config and key (never a secret).
absl::StatusOr<ServerSecurity> LoadServerSecurity(const ServerSecurityFiles& files);

// OK when `authorization` (the header's value; nullopt: the call has none) is "Bearer " + one
// of `security`'s tokens, or none is required; else UNAUTHENTICATED "no token: ..." or "token
// refused: ...", never the token. Compares against every token, each in constant time.
absl::Status CheckBearer(const ServerSecurity& security, std::optional<absl::string_view> authorization);

// The caller's roles: those of its token (every role when no token is required) and of its
// certificate (every role unless tls.roles is set), both. UNAUTHENTICATED "no token" or "token
// refused", never the token.
absl::StatusOr<CallerAuth> Authenticate(const grpc::ServerContextBase& ctx, const ServerSecurity& security);

// Under mutual TLS, the certificate name a member joining as `node` must present:
// tls.node_certificate with {node} replaced.
std::string NodeCertificateName(const ServerSecurity& security, const std::string& node);

// OK when `caller` holds one of `any_of`; else PERMISSION_DENIED: "`method` needs the admin
// role; this caller (token:reader:ranks.token) holds reader".
absl::Status CheckRole(const CallerAuth& caller, RoleSet any_of, absl::string_view method);

}  // namespace metaload

#endif  // METALOAD_SECURITY_SERVER_SECURITY_H_
