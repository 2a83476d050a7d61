// Who a server must prove it is before a rank sends it anything: the planned node's
// certificate name (issue 35). Under mutual TLS a member joins as node N only with a
// certificate named tls.node_certificate with {node} = N (daemon/service/coordinator.cc), and a
// daemon serves with the certificate it joins with; so a server whose certificate carries that
// name is N's, whatever address it was announced at. The coordinator sends the pattern with
// every plan and layout (GetPlanResponse.server_certificate); DialDaemon checks the name during
// the TLS handshake, before HTTP/2 starts, so no call and no token reaches a server that fails.
//
//   auto check = std::make_shared<ServerNameCheck>("b", NodeCertificateNameFor("{node}", "b"));
//   ML_ASSIGN_OR_RETURN(auto channel, DialDaemon(address, args, check));
//   ... a call fails UNAVAILABLE: check->Refused() says what the server presented instead.
//
// Thread-safety: ServerNameCheck is internally locked (gRPC verifies on its own threads).
#ifndef METALOAD_SECURITY_SERVER_IDENTITY_H_
#define METALOAD_SECURITY_SERVER_IDENTITY_H_

#include <grpcpp/security/tls_certificate_verifier.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace metaload {

// tls.node_certificate `pattern` with {node} replaced by `node`: the name node's certificate
// carries (the coordinator's Join check and a rank's server check use this one function).
std::string NodeCertificateNameFor(absl::string_view pattern, absl::string_view node);

// OK when `pattern` (from a daemon's answer) is a usable tls.node_certificate: empty (nothing
// to check) or "{node}" once in printable ASCII; else DataLoss naming it.
absl::Status CheckServerCertificatePattern(absl::string_view pattern);

// The name a certificate goes by, as the daemon names a client certificate
// (server_security.h CertificateName): its first non-empty common name, else its first non-empty
// subject alternative name (here DNS, URI, e-mail, IP, in this order); empty: none.
std::string PresentedCertificateName(const std::vector<std::string>& common_names,
                                     const std::vector<std::vector<std::string>>& alternative_names);

// The node a channel must reach and the certificate name that proves it; what a server that
// failed presented.
class ServerNameCheck {
 public:
  ServerNameCheck(std::string node, std::string certificate_name)
      : node_(std::move(node)), certificate_name_(std::move(certificate_name)) {}
  const std::string& node() const { return node_; }
  const std::string& certificate_name() const { return certificate_name_; }

  // OK when `presented` is certificate_name(); else remembers it and says why, naming both.
  absl::Status Check(const std::string& presented);
  // The name the last server checked presented when it was refused ("" for a certificate
  // naming no one); nullopt when none was refused, or the last one checked passed.
  std::optional<std::string> Refused() const;
  // "node "b" must present a certificate named "node-b"; the server at ADDRESS presented one
  // named "mallory" ...": the error a call to a refused server ends with.
  std::string Explain(absl::string_view address, const std::string& presented) const;

 private:
  const std::string node_, certificate_name_;
  mutable absl::Mutex mu_;
  std::optional<std::string> refused_ ABSL_GUARDED_BY(mu_);
};

// A gRPC certificate verifier that runs `check` on the server's certificate after the CA
// verified its chain. It replaces gRPC's host name check: the server proves the node, not the
// address dialed.
std::shared_ptr<grpc::experimental::CertificateVerifier> MakeServerNameVerifier(
    std::shared_ptr<ServerNameCheck> check);

}  // namespace metaload

#endif  // METALOAD_SECURITY_SERVER_IDENTITY_H_
