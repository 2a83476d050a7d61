#include "security/server_security.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "security/server_identity.h"
#include "security/token.h"
#include "util/identifiers.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// What a token file's holder is called: its file's name, never its content.
std::string FileName(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// Each role's tokens, as the config lists them. The first member token is the one this daemon
// dials with, the first admin token the one it forwards admins' calls with.
struct OwnTokens {
  std::string member, admin;
};

absl::StatusOr<OwnTokens> LoadRoleTokens(const ServerSecurityFiles& files, ServerSecurity& out) {
  if (!files.token_file.empty()) {
    ML_ASSIGN_OR_RETURN(std::string token,
                        ReadTokenFile(files.token_file, absl::StrCat(files.source, ": auth_token_file")));
    out.tokens.push_back({token, kAllRoles, kSharedTokenIdentity, TokenDigest(token)});
    return OwnTokens{token, token};
  }
  OwnTokens own;
  for (size_t i = 0; i < files.role_token_files.size(); ++i) {
    const auto& [role_name, path] = files.role_token_files[i];
    Role role = Role::kReader;
    if (!ParseRole(role_name, &role)) {
      return absl::InvalidArgumentError(
          absl::StrCat(files.source, ": auth_tokens: unknown role \"", role_name, "\""));
    }
    const std::string what = absl::StrCat(files.source, ": auth_tokens.", role_name);
    ML_ASSIGN_OR_RETURN(std::string token, ReadTokenFile(path, what));
    const BearerDigest digest = TokenDigest(token);
    for (const AcceptedToken& other : out.tokens) {
      // Two roles behind one token would make the token's role depend on list order.
      if (SameDigest(digest, other.digest)) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": ", path, " holds the same token as another file of auth_tokens: give each its own"));
      }
    }
    out.tokens.push_back(
        {token, Grant(role), absl::StrCat("token:", role_name, ":", FileName(path)), digest});
    if (role == Role::kMember && own.member.empty()) own.member = token;
    if (role == Role::kAdmin && own.admin.empty()) own.admin = token;
  }
  return own;
}

// The role a token was listed under (what it grants beyond reading).
Role ListedRole(RoleSet roles) {
  return Has(roles, Role::kAdmin) ? Role::kAdmin : Has(roles, Role::kMember) ? Role::kMember : Role::kReader;
}

}  // namespace

std::string ServerSecurity::Describe() const {
  std::string out = tls ? (mutual ? "TLS, client certificates required" : "TLS") : "plaintext";
  if (tokens.empty()) return absl::StrCat(out, ", no token");
  return absl::StrCat(
      out, tokens.size() == 1 && tokens[0].roles == kAllRoles ? ", token required" : ", tokens required");
}

std::vector<std::string> ServerSecurity::RoleNotes() const {
  std::vector<std::string> notes;
  if (tokens.size() == 1 && tokens[0].roles == kAllRoles) {
    notes.push_back(
        "one token holds every role (auth_token_file): whoever holds it may register, join and read; "
        "auth_tokens gives each role its own (docs/security.md)");
  } else if (!tokens.empty()) {
    std::vector<std::string> per_role;
    for (Role role : {Role::kReader, Role::kMember, Role::kAdmin}) {
      size_t count = 0;
      for (const AcceptedToken& t : tokens) count += ListedRole(t.roles) == role ? 1 : 0;
      per_role.push_back(absl::StrCat(count, " ", RoleName(role)));
    }
    notes.push_back(absl::StrCat("tokens: ", absl::StrJoin(per_role, ", ")));
  }
  if (mutual && !certificate_roles.configured) {
    notes.push_back(
        "every certificate the client CA signed holds every role (tls.roles is not set; docs/security.md)");
  }
  return notes;
}

absl::StatusOr<ServerSecurity> LoadServerSecurity(const ServerSecurityFiles& files) {
  ServerSecurity out;
  // The same checks as a client's files (PEM markers, cert with key), named by config key.
  CredentialFiles own;
  own.cert = files.cert;
  own.key = files.key;
  own.ca = files.ca.empty() ? files.client_ca : files.ca;
  own.cert_from = absl::StrCat(files.source, ": tls.cert");
  own.key_from = absl::StrCat(files.source, ": tls.key");
  own.ca_from = absl::StrCat(files.source, files.ca.empty() ? ": tls.client_ca" : ": tls.ca");
  ML_ASSIGN_OR_RETURN(out.as_client, LoadClientCredentials(own));
  out.certificate_roles = files.certificate_roles;
  out.node_certificate = files.node_certificate;
  if (files.cert.empty()) {
    if (!files.client_ca.empty() || !files.ca.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(files.source, ": tls: needs cert and key"));
    }
    out.as_client = ClientCredentials{};
    out.credentials = grpc::InsecureServerCredentials();
  } else {
    out.tls = true;
    out.mutual = !files.client_ca.empty();
    grpc::SslServerCredentialsOptions ssl(out.mutual
                                              ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                              : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    if (out.mutual) {
      CredentialFiles ca;
      ca.ca = files.client_ca;
      ca.ca_from = absl::StrCat(files.source, ": tls.client_ca");
      ML_ASSIGN_OR_RETURN(ClientCredentials client_ca, LoadClientCredentials(ca));
      ssl.pem_root_certs = client_ca.ca_pem;
    }
    ssl.pem_key_cert_pairs.push_back({out.as_client.key_pem, out.as_client.cert_pem});
    out.credentials = grpc::SslServerCredentials(ssl);
  }
  if (out.certificate_roles.configured && !out.mutual) {
    return absl::InvalidArgumentError(absl::StrCat(
        files.source, ": tls.roles: needs tls.client_ca (roles are read from client certificates)"));
  }
  ML_ASSIGN_OR_RETURN(OwnTokens own_tokens, LoadRoleTokens(files, out));
  out.as_client.token = own_tokens.member;
  out.as_admin = out.as_client;
  if (!own_tokens.admin.empty()) out.as_admin.token = own_tokens.admin;
  return out;
}

namespace {

// The token `authorization` (nullopt: no header) carries: its header hashed once, compared with
// every token's digest (no early exit: the same time for every token). nullptr when no token is
// required; the refusal when none matches.
absl::StatusOr<const AcceptedToken*> MatchBearer(const ServerSecurity& security,
                                                 std::optional<absl::string_view> authorization) {
  if (security.tokens.empty()) return nullptr;
  if (!authorization.has_value()) {
    return absl::UnauthenticatedError(
        "no token: this metad requires `authorization: Bearer <token>` on every call (metactl "
        "--token-file, or METALOAD_TOKEN_FILE)");
  }
  const BearerDigest header = HeaderDigest(*authorization);
  const AcceptedToken* match = nullptr;
  for (const AcceptedToken& t : security.tokens) {
    if (SameDigest(header, t.digest)) match = &t;
  }
  if (match == nullptr) {
    return absl::UnauthenticatedError(security.tokens.size() == 1 && security.tokens[0].roles == kAllRoles
                                          ? "token refused: it is not this metad's auth_token_file"
                                          : "token refused: it is none of this metad's auth_tokens");
  }
  return match;
}

}  // namespace

absl::Status CheckBearer(const ServerSecurity& security, std::optional<absl::string_view> authorization) {
  return MatchBearer(security, authorization).status();
}

absl::StatusOr<CallerAuth> Authenticate(const grpc::ServerContextBase& ctx, const ServerSecurity& security) {
  CallerAuth caller;
  caller.roles = kAllRoles;
  caller.identity = kAnonymousIdentity;
  if (!security.tokens.empty()) {
    const auto& metadata = ctx.client_metadata();
    std::optional<absl::string_view> header;
    if (auto it = metadata.find(kAuthorizationHeader); it != metadata.end()) {
      header = absl::string_view(it->second.data(), it->second.size());
    }
    ML_ASSIGN_OR_RETURN(const AcceptedToken* match, MatchBearer(security, header));
    caller.roles = match->roles;
    caller.identity = match->identity;
  }
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (security.mutual && auth != nullptr && auth->IsPeerAuthenticated()) {
    // gRPC lists an empty common name for a certificate without one (issue 35: its name was
    // then "", and the certificate name rule of Join was skipped).
    const auto values = [&auth](const char* property) {
      std::vector<std::string> out;
      for (const grpc::string_ref& value : auth->FindPropertyValues(property))
        out.emplace_back(value.data(), value.size());
      return out;
    };
    caller.certificate = true;
    caller.certificate_name =
        CertificateName(values(GRPC_X509_CN_PROPERTY_NAME), values(GRPC_X509_SAN_PROPERTY_NAME));
    caller.identity = CertificateIdentity(caller.certificate_name);
    caller.roles &= RolesOfCertificate(caller.certificate_name, security.certificate_roles);
  }
  return caller;
}

std::string CertificateName(const std::vector<std::string>& common_names,
                            const std::vector<std::string>& alternative_names) {
  for (const std::vector<std::string>* names : {&common_names, &alternative_names}) {
    for (const std::string& name : *names) {
      if (!name.empty()) return name;
    }
  }
  return "";
}

std::string CertificateIdentity(const std::string& name) {
  if (CheckIdentityName("certificate name", name).ok()) return absl::StrCat("cert:", name);
  return absl::StrCat("cert:", QuoteForMessage(name, 64));
}

std::string NodeCertificateName(const ServerSecurity& security, const std::string& node) {
  return NodeCertificateNameFor(security.node_certificate, node);
}

absl::Status CheckRole(const CallerAuth& caller, RoleSet any_of, absl::string_view method) {
  if ((caller.roles & any_of) != 0) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(method, " needs the ", DescribeRoles(any_of, " or "),
                                                  " role; this caller (", caller.identity, ") holds ",
                                                  DescribeRoles(caller.roles)));
}

}  // namespace metaload
