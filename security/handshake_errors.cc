#include "security/handshake_errors.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace metaload {

HandshakeFailure ExplainHandshakeFailure(absl::string_view message, bool client_tls, bool client_cert) {
  const std::string text = absl::AsciiStrToLower(message);
  if (absl::StrContains(text, "certificate verify failed") ||
      absl::StrContains(text, "certificate_verify_failed")) {
    return {
        true,
        "server certificate not signed by the given CA (--tls-ca, METALOAD_TLS_CA), or not issued for the "
        "address dialed"};
  }
  if (absl::StrContains(text, "wrong version number") || absl::StrContains(text, "wrong_version_number") ||
      absl::StrContains(text, "packet length too long")) {
    return {true,
            "the daemon does not speak TLS: drop --tls-ca/--tls-cert/--tls-key (METALOAD_TLS_*), or give the "
            "daemon `tls:` in its node config"};
  }
  // The daemon ended the handshake: OpenSSL on this side has nothing to say. A daemon at its
  // connection limits closes a new connection the same way, TLS or not.
  if (absl::StrContains(text, "socket closed") || absl::StrContains(text, "connection reset")) {
    constexpr absl::string_view kOrFull =
        "; or it already holds max_connections, or max_connections_per_client from this host (its log says "
        "which)";
    if (!client_tls) {
      return {false, absl::StrCat("the daemon closed the connection at once: if it uses TLS, give --tls-ca "
                                  "(METALOAD_TLS_CA), and --tls-cert/--tls-key where it requires client "
                                  "certificates",
                                  kOrFull)};
    }
    return {false,
            absl::StrCat(client_cert ? "the daemon closed the connection during the TLS handshake: it "
                                       "refused this client certificate (not signed by its tls.client_ca?)"
                                     : "the daemon closed the connection during the TLS handshake: it "
                                       "requires a client certificate (--tls-cert and --tls-key, "
                                       "METALOAD_TLS_CERT/KEY)",
                         kOrFull)};
  }
  return {};
}

}  // namespace metaload
