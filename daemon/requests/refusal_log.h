// Every call a daemon refuses, logged once with who and why, in one shape:
//   refused GetPlan from 10.0.0.7: PERMISSION_DENIED: node-a: GetPlan needs the reader role ...
// A flood of one kind (the same call refused with the same code) is one line per 10 s that
// counts the refusals since (daemon/net/occasional_log.h, as refused connections are): a
// client hammering with a wrong token costs the daemon no disk. The reason is the refusal's
// own message, which never holds a token or file content (security/server_security.h).
//
//   if (!valid.ok()) { LogRefusal("GetPlan", PeerHost(ctx->peer()), valid); return FinishNow(ctx, valid); }
//
// Thread-safety: may be called from any thread.
#ifndef METALOAD_DAEMON_REQUESTS_REFUSAL_LOG_H_
#define METALOAD_DAEMON_REQUESTS_REFUSAL_LOG_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace metaload {

// `call`: the RPC ("GetPlan"), or what was refused ("a call" when the RPC is not known yet);
// `from`: the caller's host, or empty when unknown. REQUIRES: !why.ok().
void LogRefusal(absl::string_view call, absl::string_view from, const absl::Status& why);

}  // namespace metaload

#endif  // METALOAD_DAEMON_REQUESTS_REFUSAL_LOG_H_
