// metad's side of an etcd registry (`registry: etcd://...` in the node config): the etcd
// client, the model store and this daemon's membership, wired into the service so that it
// answers every call itself as one peer among equals (daemon/registry/etcd/etcd_syncer.h).
//
//   ML_ASSIGN_OR_RETURN(auto peers, EtcdRegistry::Open(config, self, service));
//   service.SetBoundAddress(self.address(), /*is_coordinator=*/true);
//   ... serve ...
//   peers->Leave();  // on SIGTERM, before the server stops
//
// Lifetime: create it before the service (queued jobs may still write the store while the
// service is destroyed) and call Leave before the service is destroyed (Leave stops the
// thread that feeds it).
#ifndef METALOAD_DAEMON_REGISTRY_ETCD_ETCD_REGISTRY_H_
#define METALOAD_DAEMON_REGISTRY_ETCD_ETCD_REGISTRY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "daemon/config/node_config.h"
#include "daemon/registry/etcd/etcd_client.h"
#include "daemon/registry/etcd/etcd_record_store.h"
#include "daemon/registry/etcd/etcd_syncer.h"
#include "daemon/service/metad_service.h"

namespace metaload {

class EtcdRegistry {
 public:
  // Puts `self` (the NodeInfo with its dialable address) under a lease, reads every member and
  // model into `service`, and keeps doing so. Unavailable naming the endpoints when etcd does
  // not answer.
  static absl::StatusOr<std::unique_ptr<EtcdRegistry>> Open(const NodeConfig& config,
                                                            const v1::NodeInfo& self, MetadService& service);
  // Stops syncing and revokes this member's lease: the other peers stop planning on it at once.
  absl::Status Leave();

 private:
  EtcdRegistry(const NodeConfig& config, const v1::NodeInfo& self, MetadService& service);

  EtcdClient etcd_;
  EtcdRecordStore store_;
  EtcdSyncer peer_;
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_REGISTRY_ETCD_ETCD_REGISTRY_H_
