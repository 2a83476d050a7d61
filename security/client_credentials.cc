#include "security/client_credentials.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/support/client_interceptor.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "security/token.h"
#include "util/fs/file_io.h"
#include "util/fs/storage.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

constexpr uint64_t kMaxPemBytes = 1 << 20;

// A PEM file's text; InvalidArgument naming `from` and the path.
absl::StatusOr<std::string> ReadPem(const std::string& path, const std::string& from,
                                    absl::string_view marker, absl::string_view what) {
  absl::StatusOr<std::string> text = ReadSmallFile(path, kMaxPemBytes, what);
  if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat(from, ": ", text.status().message()));
  if (!absl::StrContains(*text, "-----BEGIN ") || !absl::StrContains(*text, marker)) {
    return absl::InvalidArgumentError(absl::StrCat(from, ": ", path, " is not a PEM ", what));
  }
  return text;
}

// Adds the token to every call's headers, whatever the channel's security.
class BearerInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kAuthorizationHeader, *header_);
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

class BearerInterceptorFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerInterceptorFactory(std::string token) : header_(absl::StrCat(kBearerPrefix, token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo*) override {
    return new BearerInterceptor(&header_);
  }

 private:
  const std::string header_;  // lives as long as the channel, which owns the factory
};

// TLS as grpc::SslCredentials makes it (the CA, the client certificate), but the server's
// certificate must be named as `server` says instead of naming the address dialed. gRPC checks
// it after the TLS handshake and before it starts HTTP/2 on the connection: a call's headers,
// the token among them, are only ever written to a connection that passed (gRPC 1.51's
// security handshaker hands the endpoint to the HTTP/2 transport only after check_peer).
std::shared_ptr<grpc::ChannelCredentials> NodeCheckingCredentials(const ClientCredentials& credentials,
                                                                  std::shared_ptr<ServerNameCheck> server) {
  grpc::experimental::TlsChannelCredentialsOptions options;
  std::vector<grpc::experimental::IdentityKeyCertPair> identity;
  if (!credentials.cert_pem.empty()) identity.push_back({credentials.key_pem, credentials.cert_pem});
  if (!credentials.ca_pem.empty() || !identity.empty()) {
    options.set_certificate_provider(
        std::make_shared<grpc::experimental::StaticDataCertificateProvider>(credentials.ca_pem, identity));
  }
  if (!credentials.ca_pem.empty()) options.watch_root_certs();  // else the system's roots
  if (!identity.empty()) options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(true);
  options.set_certificate_verifier(MakeServerNameVerifier(std::move(server)));
  options.set_check_call_host(false);  // the node's name is checked, not a host
  return grpc::experimental::TlsCredentials(options);
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

absl::Mutex process_mu(absl::kConstInit);
std::shared_ptr<const ClientCredentials>* process_credentials ABSL_GUARDED_BY(process_mu) = nullptr;
absl::Status* process_error ABSL_GUARDED_BY(process_mu) = nullptr;

}  // namespace

CredentialFiles CredentialFilesFromEnvironment(const CredentialFiles& names) {
  CredentialFiles files;
  files.ca_from = names.ca_from, files.cert_from = names.cert_from, files.key_from = names.key_from;
  files.token_from = names.token_from;
  // Named as the variable when it is the one set, else as both (a message about a file that
  // is missing points at either way of giving it).
  auto from_env = [](const char* name, std::string& value, std::string& from) {
    value = Env(name);
    from = value.empty() ? absl::StrCat(from, " (", name, ")") : name;
  };
  from_env("METALOAD_TLS_CA", files.ca, files.ca_from);
  from_env("METALOAD_TLS_CERT", files.cert, files.cert_from);
  from_env("METALOAD_TLS_KEY", files.key, files.key_from);
  from_env("METALOAD_TOKEN_FILE", files.token, files.token_from);
  return files;
}

CredentialFiles MergeCredentialFiles(const CredentialFiles& flags, const CredentialFiles& environment) {
  CredentialFiles out = environment;
  if (!flags.ca.empty()) out.ca = flags.ca, out.ca_from = flags.ca_from;
  if (!flags.cert.empty()) out.cert = flags.cert, out.cert_from = flags.cert_from;
  if (!flags.key.empty()) out.key = flags.key, out.key_from = flags.key_from;
  if (!flags.token.empty()) out.token = flags.token, out.token_from = flags.token_from;
  return out;
}

absl::StatusOr<ClientCredentials> LoadClientCredentials(const CredentialFiles& files) {
  ClientCredentials out;
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(files.cert.empty()
                                          ? absl::StrCat(files.key_from, " is set but not ", files.cert_from,
                                                         ": a client key needs its certificate")
                                          : absl::StrCat(files.cert_from, " is set but not ", files.key_from,
                                                         ": a client certificate needs its private key"));
  }
  if (!files.ca.empty()) {
    ML_ASSIGN_OR_RETURN(out.ca_pem, ReadPem(files.ca, files.ca_from, "CERTIFICATE-----", "CA certificate"));
    out.ca_path = files.ca;
    out.tls = true;
  }
  if (!files.cert.empty()) {
    ML_ASSIGN_OR_RETURN(out.cert_pem,
                        ReadPem(files.cert, files.cert_from, "CERTIFICATE-----", "certificate"));
    ML_ASSIGN_OR_RETURN(out.key_pem, ReadPem(files.key, files.key_from, "PRIVATE KEY-----", "private key"));
    out.tls = true;
  }
  if (!files.token.empty()) {
    ML_ASSIGN_OR_RETURN(out.token, ReadTokenFile(files.token, files.token_from));
  }
  return out;
}

absl::Status SetProcessCredentials(const CredentialFiles& files) {
  absl::StatusOr<ClientCredentials> loaded = LoadClientCredentials(files);
  absl::MutexLock lock(&process_mu);
  delete process_credentials;
  delete process_error;
  process_credentials = nullptr;
  process_error = nullptr;
  if (!loaded.ok()) {
    process_error = new absl::Status(loaded.status());
    return loaded.status();
  }
  process_credentials = new std::shared_ptr<const ClientCredentials>(
      std::make_shared<const ClientCredentials>(std::move(*loaded)));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const ClientCredentials>> ProcessCredentials() {
  {
    absl::MutexLock lock(&process_mu);
    if (process_credentials != nullptr) return *process_credentials;
    if (process_error != nullptr) return *process_error;
  }
  (void)SetProcessCredentials(CredentialFilesFromEnvironment());
  absl::MutexLock lock(&process_mu);
  if (process_credentials != nullptr) return *process_credentials;
  return *process_error;
}

std::shared_ptr<grpc::Channel> DialDaemon(const std::string& address, const grpc::ChannelArguments& args,
                                          const ClientCredentials& credentials,
                                          std::shared_ptr<ServerNameCheck> server) {
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials;
  if (credentials.tls && server != nullptr) {
    channel_credentials = NodeCheckingCredentials(credentials, std::move(server));
  } else if (credentials.tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = credentials.ca_pem;
    ssl.pem_private_key = credentials.key_pem;
    ssl.pem_cert_chain = credentials.cert_pem;
    channel_credentials = grpc::SslCredentials(ssl);
  } else {
    channel_credentials = grpc::InsecureChannelCredentials();
  }
  if (credentials.token.empty()) return grpc::CreateCustomChannel(address, channel_credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<BearerInterceptorFactory>(credentials.token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, channel_credentials, args,
                                                                 std::move(interceptors));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> DialDaemon(const std::string& address,
                                                          const grpc::ChannelArguments& args,
                                                          std::shared_ptr<ServerNameCheck> server) {
  ML_ASSIGN_OR_RETURN(std::shared_ptr<const ClientCredentials> credentials, ProcessCredentials());
  return DialDaemon(address, args, *credentials, std::move(server));
}

}  // namespace metaload
