// Whether the coordinator a node config names is this daemon itself, however the address is
// written: `node.example.yaml` says `listen: 0.0.0.0:7070` and `coordinator: gpu-node-01:7070`
// on gpu-node-01, which must not make the coordinator try to join itself forever.
#ifndef METALOAD_DAEMON_CONFIG_SELF_ADDRESS_H_
#define METALOAD_DAEMON_CONFIG_SELF_ADDRESS_H_

#include <string>

#include "daemon/config/node_config.h"

namespace metaload {

// True when `config.coordinator` is empty; equals `config.listen` or `advertised`; or names
// `bound_port` on a host that is this machine: "localhost", `hostname`, or a name or address
// that resolves to an address of one of this machine's interfaces (loopback included).
// Resolves names (getaddrinfo): call at start, not on a gRPC reaction.
bool CoordinatorIsSelf(const NodeConfig& config, const std::string& advertised, int bound_port,
                       const std::string& hostname);

}  // namespace metaload

#endif  // METALOAD_DAEMON_CONFIG_SELF_ADDRESS_H_
