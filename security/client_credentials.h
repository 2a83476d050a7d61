// How this process proves who it is to a metad and checks that it talks to the right one:
// TLS (a CA to verify the daemon's certificate, optionally a client certificate for mutual
// TLS) and a bearer token (security/token.h). Every channel to a daemon is made by DialDaemon.
//
// Where they come from: metactl's --tls-ca/--tls-cert/--tls-key/--token-file, defaulting to
// METALOAD_TLS_CA, METALOAD_TLS_CERT, METALOAD_TLS_KEY, METALOAD_TOKEN_FILE (what torchrun-
// launched ranks and `import metaload` use); a daemon dialing its coordinator uses its own
// node config (daemon/config/node_config.h `tls`, `auth_token_file`). None set: plaintext, no token.
//
//   ML_RETURN_IF_ERROR(SetProcessCredentials(files));   // once, from flags (metactl)
//   ML_ASSIGN_OR_RETURN(auto channel, DialDaemon(address, args));
#ifndef METALOAD_SECURITY_CLIENT_CREDENTIALS_H_
#define METALOAD_SECURITY_CLIENT_CREDENTIALS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "security/server_identity.h"

namespace metaload {

// Paths, as given; empty: not set.
struct CredentialFiles {
  std::string ca, cert, key, token;
  // Where each came from, for messages: "--tls-ca" or "METALOAD_TLS_CA".
  std::string ca_from = "--tls-ca", cert_from = "--tls-cert", key_from = "--tls-key",
              token_from = "--token-file";
};

// The files' contents. Plaintext unless `tls`.
struct ClientCredentials {
  bool tls = false;
  std::string ca_pem;    // empty with tls: the system's roots
  std::string cert_pem;  // with key_pem: a client certificate (mutual TLS)
  std::string key_pem;
  std::string token;    // empty: no authorization header
  std::string ca_path;  // for messages ("not signed by the CA in /etc/metaload/ca.pem")
};

// METALOAD_TLS_CA, METALOAD_TLS_CERT, METALOAD_TLS_KEY, METALOAD_TOKEN_FILE.
// An unset variable's file is named as `names` names it with the variable beside it
// ("--tls-key (METALOAD_TLS_KEY)"; the Python package names its arguments instead).
CredentialFiles CredentialFilesFromEnvironment(const CredentialFiles& names = CredentialFiles());
// `flags` where set, else the environment's.
CredentialFiles MergeCredentialFiles(const CredentialFiles& flags, const CredentialFiles& environment);

// Reads and checks the files: InvalidArgument naming the flag or variable and the path (never
// the token or a key's content) when one is missing, unreadable, not PEM, or when a
// certificate comes without its key (or the reverse). A certificate without --tls-ca turns TLS
// on with the system's roots.
absl::StatusOr<ClientCredentials> LoadClientCredentials(const CredentialFiles& files);

// This process's credentials for every later DialDaemon without explicit ones. Call once,
// before dialing (metactl does it after parsing flags). Error: as LoadClientCredentials.
absl::Status SetProcessCredentials(const CredentialFiles& files);
// Set, or else loaded once from the environment (the Python package, ranks started by a
// launcher); an error in the environment's files is returned to every caller.
absl::StatusOr<std::shared_ptr<const ClientCredentials>> ProcessCredentials();

// A channel to the daemon at `address` with `credentials` (TLS or not) whose calls all carry
// the token. The address's host is what the daemon's certificate must name; with `server` over
// TLS, the certificate must instead carry server->certificate_name() (security/server_identity.h:
// a planned node's name), checked in the handshake, before the HTTP/2 connection exists, so no
// call and no token reaches a server that fails it. Without TLS `server` proves nothing and is
// not used.
std::shared_ptr<grpc::Channel> DialDaemon(const std::string& address, const grpc::ChannelArguments& args,
                                          const ClientCredentials& credentials,
                                          std::shared_ptr<ServerNameCheck> server = nullptr);
// With ProcessCredentials().
absl::StatusOr<std::shared_ptr<grpc::Channel>> DialDaemon(const std::string& address,
                                                          const grpc::ChannelArguments& args = {},
                                                          std::shared_ptr<ServerNameCheck> server = nullptr);

}  // namespace metaload

#endif  // METALOAD_SECURITY_CLIENT_CREDENTIALS_H_
