#include "daemon/registry/etcd/etcd_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "util/log.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// A member is gone from the other peers' plans at most TTL after its last renewal, plus up to
// 0.5 s until etcd notices the expiry and 0.5 s until they read the members: a TTL one second
// under member_timeout keeps that within member_timeout. etcd grants no lease under ~2 s.
absl::Duration LeaseTtl(absl::Duration member_timeout) {
  return std::max(absl::Seconds(2), absl::Trunc(member_timeout, absl::Seconds(1)) - absl::Seconds(1));
}

EtcdSyncer::Sink SinkInto(MetadService& service) {
  EtcdSyncer::Sink sink;
  sink.members = [&service](const std::vector<v1::NodeInfo>& members) { service.SyncMembers(members); };
  sink.apply_model = [&service](const StoredRecord& stored) {
    return service.ApplySharedModel(stored.record);
  };
  sink.drop_model = [&service](const std::string& name) { service.DropSharedModel(name); };
  sink.model_names = [&service] { return service.ModelNames(); };
  return sink;
}

}  // namespace

EtcdRegistry::EtcdRegistry(const NodeConfig& config, const v1::NodeInfo& self, MetadService& service)
    : etcd_(config.registry_endpoints),
      store_(&etcd_, config.registry_prefix),
      peer_(&etcd_, &store_, self,
            EtcdSyncer::Options{config.registry_prefix, LeaseTtl(config.member_timeout)}, SinkInto(service)) {
}

absl::StatusOr<std::unique_ptr<EtcdRegistry>> EtcdRegistry::Open(const NodeConfig& config,
                                                                 const v1::NodeInfo& self,
                                                                 MetadService& service) {
  const absl::Time start = absl::Now();
  std::unique_ptr<EtcdRegistry> registry(new EtcdRegistry(config, self, service));
  const std::string where =
      absl::StrCat(registry->etcd_.Describe(), " (prefix ", config.registry_prefix, ")");
  if (absl::Status joined = registry->peer_.Join(); !joined.ok()) {
    return absl::Status(joined.code(), absl::StrCat("joining the registry ", where, ": ", joined.message()));
  }
  EtcdRecordStore* store = &registry->store_;
  service.ShareRegistry(MetadService::SharedRegistry{
      store, [store](const std::string& name) { return store->GetForUpdate(name); },
      registry->etcd_.Describe()});
  if (absl::Status synced = registry->peer_.SyncOnce(); !synced.ok()) {
    (void)registry->peer_.Leave();  // not serving: take the member key back out
    return absl::Status(synced.code(), absl::StrCat("reading the registry ", where, ": ", synced.message()));
  }
  LogInfo(absl::StrCat("registry: joined ", where, " as ", self.name(), "; ", service.ModelNames().size(),
                       " models read in ", absl::ToInt64Milliseconds(absl::Now() - start), " ms"));
  registry->peer_.Start();
  return registry;
}

absl::Status EtcdRegistry::Leave() { return peer_.Leave(); }

}  // namespace metaload
