// metad's side of an etcd registry (`registry: etcd://...` in the node config): the etcd
// client, the model store and this daemon's membership, wired into the service so that it
// answers every call itself as one peer among equals (daemon/registry/etcd_peer.h).
//
//   ML_ASSIGN_OR_RETURN(auto peers, PeerRegistry::Open(config, self, service));
//   service.SetBoundAddress(self.address(), /*is_coordinator=*/true);
//   ... serve ...
//   peers->Leave();  // on SIGTERM, before the server stops
//
// Lifetime: create it before the service (queued jobs may still write the store while the
// service is destroyed) and call Leave before the service is destroyed (Leave stops the
// thread that feeds it).
#ifndef METALOAD_DAEMON_PEER_REGISTRY_H_
#define METALOAD_DAEMON_PEER_REGISTRY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "daemon/node_config.h"
#include "daemon/registry/etcd_client.h"
#include "daemon/registry/etcd_model_store.h"
#include "daemon/registry/etcd_peer.h"
#include "daemon/service.h"

namespace metaload {

class PeerRegistry {
 public:
  // Puts `self` (the NodeInfo with its dialable address) under a lease, reads every member and
  // model into `service`, and keeps doing so. Unavailable naming the endpoints when etcd does
  // not answer.
  static absl::StatusOr<std::unique_ptr<PeerRegistry>> Open(const NodeConfig& config,
                                                            const v1::NodeInfo& self, MetadService& service);
  // Stops syncing and revokes this member's lease: the other peers stop planning on it at once.
  absl::Status Leave();

 private:
  PeerRegistry(const NodeConfig& config, const v1::NodeInfo& self, MetadService& service);

  EtcdClient etcd_;
  EtcdModelStore store_;
  EtcdPeer peer_;
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_PEER_REGISTRY_H_
