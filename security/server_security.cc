#include "security/server_security.h"

#include "absl/strings/str_cat.h"
#include "security/token.h"
#include "util/status_macros.h"

namespace metaload {

std::string ServerSecurity::Describe() const {
  std::string out = tls ? (mutual ? "TLS, client certificates required" : "TLS") : "plaintext";
  absl::StrAppend(&out, token.empty() ? ", no token" : ", token required");
  return out;
}

absl::StatusOr<ServerSecurity> LoadServerSecurity(const ServerSecurityFiles& files) {
  ServerSecurity out;
  // The same checks as a client's files (PEM markers, cert with key), named by config key.
  CredentialFiles own;
  own.cert = files.cert;
  own.key = files.key;
  own.ca = files.ca.empty() ? files.client_ca : files.ca;
  own.token = files.token_file;
  own.cert_from = absl::StrCat(files.source, ": tls.cert");
  own.key_from = absl::StrCat(files.source, ": tls.key");
  own.ca_from = absl::StrCat(files.source, files.ca.empty() ? ": tls.client_ca" : ": tls.ca");
  own.token_from = absl::StrCat(files.source, ": auth_token_file");
  ML_ASSIGN_OR_RETURN(out.as_client, LoadClientCredentials(own));
  out.token = out.as_client.token;
  if (files.cert.empty()) {
    if (!files.client_ca.empty() || !files.ca.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(files.source, ": tls: needs cert and key"));
    }
    out.as_client = ClientCredentials{};
    out.as_client.token = out.token;
    out.credentials = grpc::InsecureServerCredentials();
    return out;
  }
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
  return out;
}

absl::Status CheckCaller(const grpc::ServerContextBase& ctx, const std::string& token) {
  if (token.empty()) return absl::OkStatus();
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find(kAuthorizationHeader);
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        "no token: this metad requires `authorization: Bearer <token>` on every call (metactl --token-file, "
        "or METALOAD_TOKEN_FILE)");
  }
  if (!BearerMatches(absl::string_view(it->second.data(), it->second.size()), token)) {
    return absl::UnauthenticatedError("token refused: it is not this metad's auth_token_file");
  }
  return absl::OkStatus();
}

std::string CallerIdentity(const grpc::ServerContextBase& ctx, bool token_required) {
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    std::vector<grpc::string_ref> names = auth->FindPropertyValues("x509_common_name");
    if (names.empty()) names = auth->GetPeerIdentity();
    if (!names.empty()) return absl::StrCat("cert:", std::string(names.front().data(), names.front().size()));
  }
  return token_required ? "token" : "anonymous";
}

}  // namespace metaload
