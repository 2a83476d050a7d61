// Everything metad's /metrics says (docs/operations.md lists each metric), written from the
// parts that count it: the service (bytes served, streams, uploads, members, models, plans),
// the connection caps (daemon/net/), the per-RPC metrics of the main port, the health state
// and the process (/proc/self). Read when scraped, on the scrape server's thread; nothing here
// is updated on a call's path except the RPC metrics' atomics.
//
//   DaemonMetricsSources sources{&node.service(), preauth, &connections, &rpcs, &health_serving, fds.soft};
//   std::string body = WriteDaemonMetrics(sources);
#ifndef METALOAD_DAEMON_METRICS_DAEMON_METRICS_H_
#define METALOAD_DAEMON_METRICS_DAEMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "daemon/metrics/rpc_metrics.h"
#include "daemon/net/connection_cap.h"
#include "daemon/net/preauth_connections.h"
#include "daemon/service/metad_service.h"

namespace metaload {

// Each must outlive the scrape server that writes from it.
struct DaemonMetricsSources {
  const MetadService* service = nullptr;
  const PreauthConnections* preauth = nullptr;
  const ConnectionCap* connections = nullptr;
  uint32_t max_preauth_connections = 0;  // the node config's
  const RpcMetrics* rpcs = nullptr;
  const std::atomic<bool>* serving = nullptr;  // what the health service says now
  uint64_t max_fds = 0;                        // the soft limit in force (daemon/net/fd_limit.h)
};

std::string WriteDaemonMetrics(const DaemonMetricsSources& sources);

// Descriptors this process holds (the entries of /proc/self/fd); 0 when unreadable.
uint64_t OpenFileDescriptors();

}  // namespace metaload

#endif  // METALOAD_DAEMON_METRICS_DAEMON_METRICS_H_
