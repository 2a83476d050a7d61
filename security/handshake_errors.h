// What a failed connection's gRPC message means in the words of someone setting up TLS:
// gRPC reports a bad CA, a missing client certificate or a protocol mismatch as UNAVAILABLE
// with OpenSSL's reason buried in the text, or only as "Socket closed" when the daemon ended
// the handshake.
#ifndef METALOAD_SECURITY_HANDSHAKE_ERRORS_H_
#define METALOAD_SECURITY_HANDSHAKE_ERRORS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace metaload {

struct HandshakeFailure {
  bool certain = false;     // the message says TLS failed (else it is a likely reading)
  std::string explanation;  // empty: not about TLS
};

// `message`: gRPC's, for a call that never connected. `client_tls`, `client_cert`: whether
// this process spoke TLS and presented a certificate. E.g. "server certificate not signed by
// the given CA (--tls-ca, METALOAD_TLS_CA), or not issued for the address dialed".
HandshakeFailure ExplainHandshakeFailure(absl::string_view message, bool client_tls, bool client_cert);

}  // namespace metaload

#endif  // METALOAD_SECURITY_HANDSHAKE_ERRORS_H_
