// An etcd peer's backend (backend.h): a Coordinator whose registry and membership are shared
// by every daemon of the cluster through etcd (`registry: etcd://...`), so that any daemon
// answers any call itself. Registrations and removals are written to the shared store before
// memory (compare-and-set: two peers never both register one name); a model asked for that
// this daemon does not hold yet is read from the store once before the answer is NOT_FOUND
// (registered on another peer a moment ago); the registry's syncer (registry/etcd/) feeds
// the members and the models other peers wrote. Join and PublishModel are refused: members
// join through the registry.
//
//   auto peer = std::make_unique<Peer>(service.BindAddress(address), &store, "etcd://h:2379");
//   ... the syncer's sink calls peer->SyncMembers / ApplyShared / DropShared ...
//   service.Start(std::move(peer));
//
// Thread-safety: every method may be called concurrently (the syncer's thread and gRPC's).
#ifndef METALOAD_DAEMON_SERVICE_PEER_H_
#define METALOAD_DAEMON_SERVICE_PEER_H_

#include <string>
#include <vector>

#include "daemon/registry/record_store.h"
#include "daemon/service/coordinator.h"

namespace metaload {

class Peer final : public Coordinator {
 public:
  // `store`: the shared registry, which must outlive this; `describe`: where it is, for
  // GetStatus and messages ("etcd://10.0.0.5:2379").
  Peer(BackendContext context, SharedRecordStore* store, std::string describe);

  RoleStatus Status() const override;
  absl::Status Takes(MemberCall call) const override;

  // What the registry's syncer feeds: the other members as the registry lists them
  // (REQUIRES: CheckNodeInfo passed for each); a record another peer wrote, validated like a
  // PublishModel request (the error says why it is not used); a model another peer removed;
  // the models held.
  void SyncMembers(const std::vector<NodeSpec>& members) { members_.Sync(members); }
  // `origin`: where it was read ("etcd key ..."), named when its files refuse it.
  absl::Status ApplyShared(const v1::ModelRecord& record, const std::string& origin);
  void DropShared(const std::string& name);
  std::vector<std::string> ModelNames() const { return registry_.Names(); }

 protected:
  // Makes what this daemon holds under `name` what the shared registry holds now (applied, or
  // dropped when absent). When the registry cannot be read (logged), nothing changes.
  void RefreshFromRegistry(const std::string& name) override;

 private:
  SharedRecordStore* const store_;
  const std::string describe_;
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVICE_PEER_H_
