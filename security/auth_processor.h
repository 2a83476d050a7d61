// Credentials checked on a call's headers, before gRPC accepts its message: a
// grpc::AuthMetadataProcessor on the daemon's server credentials. Without it the token is
// checked in the handler, once the whole request has arrived, and a client without one could
// make the daemon buffer every message it declares (docs/security.md, "What an unauthenticated
// connection can cost"). The handler still checks the caller (server_security.h CheckCaller):
// this is the earlier, cheaper refusal of everyone who has no valid token at all.
//
//   std::shared_ptr<grpc::ServerCredentials> credentials = WithHeaderAuthentication(
//       security.credentials, security.tls, node_name,
//       [&security](std::optional<absl::string_view> header) { return CheckBearer(security, header); });
//
// Thread-safety: the processor is called on gRPC's transport threads, concurrently; it holds
// nothing mutable.
#ifndef METALOAD_SECURITY_AUTH_PROCESSOR_H_
#define METALOAD_SECURITY_AUTH_PROCESSOR_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace metaload {

// OK when the `authorization` header value (nullopt: the call has none) authenticates its
// caller; else the refusal (server_security.h CheckBearer), never naming the header.
using HeaderCheck = std::function<absl::Status(std::optional<absl::string_view> authorization)>;

// Whether `path` (a call's :path) is the standard health service's Check or Watch
// (grpc.health.v1.Health): the only calls that need no token, because Kubernetes' gRPC probes
// and load balancers' health checks carry none. They say SERVING or NOT_SERVING, nothing else;
// and they do not count as authenticating their connection (daemon/metad_main.cc), which stays
// under the pre-authentication limits.
bool IsHealthCheckPath(absl::string_view path);

// `credentials` (the daemon's: TLS when `tls`, else plaintext) with a processor that refuses,
// on the headers, every call `check` refuses but health checks (IsHealthCheckPath), as UNAUTHENTICATED
// "<node>: <why>". gRPC 1.51's plaintext server credentials take no processor (it aborts), so plaintext
// becomes xDS server credentials with a plaintext fallback: the same bytes on the wire, and the processor
// runs.
std::shared_ptr<grpc::ServerCredentials> WithHeaderAuthentication(
    std::shared_ptr<grpc::ServerCredentials> credentials, bool tls, std::string node, HeaderCheck check);

}  // namespace metaload

#endif  // METALOAD_SECURITY_AUTH_PROCESSOR_H_
