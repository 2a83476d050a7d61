// A daemon's side of security/client_credentials.h: the credentials its gRPC port listens
// with (TLS; with `client_ca`, mutual TLS), the token every call must carry, who a caller is,
// and the credentials the daemon itself dials its coordinator with (the same certificate and
// token: daemon-to-daemon calls pass the same checks as any client's).
#ifndef METALOAD_SECURITY_SERVER_SECURITY_H_
#define METALOAD_SECURITY_SERVER_SECURITY_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "security/client_credentials.h"

namespace metaload {

// Paths from the node config (daemon/config/node_config.h); empty: not set.
struct ServerSecurityFiles {
  std::string cert, key;   // TLS on the port when set (both or neither)
  std::string client_ca;   // mutual TLS: callers must present a certificate it signed
  std::string ca;          // verifies the daemons this one dials; default client_ca
  std::string token_file;  // every call must carry `authorization: Bearer <token>`
  std::string source;      // "node.yaml", for messages
};

struct ServerSecurity {
  std::shared_ptr<grpc::ServerCredentials> credentials;  // insecure unless TLS
  bool tls = false;
  bool mutual = false;
  std::string token;             // empty: calls need no token
  ClientCredentials as_client;   // for calls this daemon makes to others
  std::string Describe() const;  // "TLS, client certificates required, token required"
};

// Reads and checks the files; InvalidArgument naming the config and key (never a secret).
absl::StatusOr<ServerSecurity> LoadServerSecurity(const ServerSecurityFiles& files);

// OK when the call carries the token (or none is required); else UNAUTHENTICATED: "no token"
// or "token refused", naming the method, never the token.
absl::Status CheckCaller(const grpc::ServerContextBase& ctx, const std::string& token);

// Who called, for logs and for binding a member's entry to its owner: the client
// certificate's common name (or first subject name) under mutual TLS ("cert:node-b"), else
// "token" when a token was required and matched, else "anonymous".
std::string CallerIdentity(const grpc::ServerContextBase& ctx, bool token_required);

}  // namespace metaload

#endif  // METALOAD_SECURITY_SERVER_SECURITY_H_
