// metad's parts apart from its gRPC server, made and destroyed in the order they need: the
// meta tensors and the registry's storage (which the service's queued jobs may still write
// while it is destroyed), the service, and the role chosen once the server listens (who this
// daemon is only shows then: with `listen: host:0` the kernel picks the port), with the thread
// that keeps it a member. daemon/main.cc is the process around it; tests run one in-process.
//
//   Node node(config, std::move(security));
//   ... start a grpc::Server with node.service() on config.listen, learn `port` ...
//   ML_ASSIGN_OR_RETURN(Node::Role role, node.Start(port, hostname));
//   ... say that it serves ...
//   node.StartJoining();
//   ... serve until SIGTERM ...
//   node.Leave();  // then stop the server
//
// Thread-safety: Start and Leave from one thread (main's); the service is thread-safe.
#ifndef METALOAD_DAEMON_SERVICE_NODE_H_
#define METALOAD_DAEMON_SERVICE_NODE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/config/node_config.h"
#include "daemon/membership/joiner.h"
#include "daemon/registration/meta_tensor_store.h"
#include "daemon/registry/etcd/etcd_registry.h"
#include "daemon/registry/record_store.h"
#include "daemon/service/metad_service.h"
#include "security/server_security.h"

namespace metaload {

class Agent;  // service/agent.h

// The node config's `tls`, `auth_token_file` and `auth_tokens`, read and checked
// (security/server_security.h).
absl::StatusOr<ServerSecurity> LoadNodeSecurity(const NodeConfig& config);

class Node {
 public:
  // Which backend Start chose (service/backend.h).
  enum class Role { kCoordinator, kPeer, kAgent };

  // `seams`: what the service reads files through and tells of what it serves (metad_service.h);
  // the defaults in production.
  Node(const NodeConfig& config, ServerSecurity security, ServiceSeams seams = {});
  ~Node();

  MetadService& service() { return service_; }

  // Once the server listens on `port`: works out the address this daemon is reached at (a
  // wildcard host becomes `hostname`) and whether it coordinates (daemon/config/
  // self_address.h), opens the registry (a coordinator's state_dir, restored; or etcd, read
  // whole, for a peer; a node agent only warns about a state_dir) and starts the service with
  // the backend of its role, so that its first answer already knows every model. The error of
  // a registry that cannot be opened or read.
  absl::StatusOr<Role> Start(int port, const std::string& hostname);
  // A node agent, after Start: keeps joining its coordinator (membership/joiner.h) until Leave.
  void StartJoining();
  // The address Start worked out.
  const std::string& address() const { return address_; }

  // Whether this daemon can serve, for the gRPC health service (docs/operations.md): started
  // (its registry opened and read), and for a node agent, its coordinator reachable: the last
  // join answered, and came within member_timeout (at least 6 s: it re-joins every 2 s). `why_not`,
  // when not null, is set to the reason when it cannot.
  bool Serving(std::string* why_not = nullptr) const;

  // On SIGTERM, before the server stops: tells the coordinator (or the registry) that this
  // daemon is leaving, so that plans made from now on list other servers; logs what happened.
  void Leave();

 private:
  const NodeConfig config_;
  MetaTensorStore meta_;
  std::unique_ptr<RecordStore> records_;  // a coordinator's state_dir
  std::unique_ptr<EtcdRegistry> etcd_;    // a peer's; left before the service goes
  MetadService service_;
  Agent* agent_ = nullptr;          // the service's backend, when it is an agent
  std::unique_ptr<Joiner> joiner_;  // an agent's; stopped before the service goes
  std::string address_;
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVICE_NODE_H_
