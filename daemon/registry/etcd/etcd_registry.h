// A node's etcd registry (`registry: etcd://...` in the node config): the etcd client, the
// shared record store and this daemon's membership and syncer, opened together, so that the
// daemon answers every call itself as one peer among equals (daemon/service/peer.h).
//
//   EtcdRegistry etcd(config, self);                 // nothing is sent yet
//   Peer peer(context, etcd.store(), etcd.Describe());
//   ML_RETURN_IF_ERROR(etcd.Open(sink_into_peer));   // joined, read once, kept in step
//   ... serve ...
//   etcd.Leave();  // on SIGTERM, before the server stops
//
// Lifetime: create it before what the sink feeds and what writes the store (queued jobs may
// still write it while the service is destroyed), and stop it (Leave or StopSyncing) before
// what the sink feeds is destroyed.
//
// Thread-safety: Open, Leave and StopSyncing from one thread; the store is thread-safe.
#ifndef METALOAD_DAEMON_REGISTRY_ETCD_ETCD_REGISTRY_H_
#define METALOAD_DAEMON_REGISTRY_ETCD_ETCD_REGISTRY_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/config/node_config.h"
#include "daemon/registry/etcd/etcd_client.h"
#include "daemon/registry/etcd/etcd_record_store.h"
#include "daemon/registry/etcd/etcd_syncer.h"
#include "proto/metaload.pb.h"
#include "security/client_credentials.h"

namespace metaload {

class EtcdRegistry {
 public:
  // `self`: this daemon's NodeInfo, with its dialable address; `credentials`: TLS to etcd
  // (registry_tls), plaintext by default.
  EtcdRegistry(const NodeConfig& config, const v1::NodeInfo& self, const ClientCredentials& credentials = {},
               EtcdClient::Login login = {});
  // With the registry_tls files and registry_auth's password file read: InvalidArgument naming
  // the key and the path when one is missing or not PEM (never a password).
  static absl::StatusOr<std::unique_ptr<EtcdRegistry>> Create(const NodeConfig& config,
                                                              const v1::NodeInfo& self);

  // The records every peer reads and writes.
  SharedRecordStore* store() { return &store_; }
  // "etcd://10.0.0.5:2379", for GetStatus and messages.
  std::string Describe() const { return etcd_.Describe(); }

  // Puts this member under a lease, reads every member and model into `sink`, and keeps doing
  // so on a thread of its own. Unavailable naming the endpoints when etcd still does not answer
  // after kJoinRetryWindow of tries.
  absl::Status Open(EtcdSyncer::Sink sink);

  // How long Open keeps trying while etcd does not answer or answers late, and the pause
  // between tries.
  static constexpr absl::Duration kJoinRetryWindow = absl::Seconds(15);
  static constexpr absl::Duration kJoinRetryPause = absl::Seconds(1);
  // Stops syncing and revokes this member's lease: the other peers stop planning on it at once.
  absl::Status Leave();
  // Stops syncing; the lease is left to expire.
  void StopSyncing();

 private:
  // One try of Open: join, then read every member and model (leaving again when that fails).
  absl::Status JoinAndRead(const std::string& where);

  const std::string prefix_;
  EtcdClient etcd_;
  EtcdRecordStore store_;
  const v1::NodeInfo self_;
  const absl::Duration member_ttl_;
  std::unique_ptr<EtcdSyncer> syncer_;  // made by Open, which is handed the sink
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_REGISTRY_ETCD_ETCD_REGISTRY_H_
