// The etcd RecordStore: registered models as keys in etcd, shared by every daemon of a cluster
// configured with `registry: etcd://...` (docs/node-config.md). Every daemon reads the others'
// writes back (daemon/registry/etcd/etcd_syncer.h).
//
//   EtcdClient etcd({"127.0.0.1:2379"});
//   EtcdRecordStore store(&etcd, "/metaload/");
//   ML_RETURN_IF_ERROR(store.Put(record));          // key /metaload/models/<registered_on>/<name>
//
// Each node publishes under a key range of its own, `<prefix>models/<node>/`, so that etcd's
// RBAC can let each peer write only its own publications (deploy/etcd-peer-roles.sh,
// docs/security.md). A record under `models/<node>/` is used only if it names <node> as
// registered_on and its key's model name as its name. Two nodes may hold keys of one model
// name: the key created first (lowest create_revision) is the name's record, for every peer
// alike; the others are ignored. A create_revision never changes while the key lives, and only
// its node can delete it, so a peer that writes a name later never takes it over, however it
// rewrites its own key. A key not of this layout (the layout before it, `models/<name>`, among
// them) is listed in `Listing::strays`, never read.
//
// Each value is the bytes of an embedded record file (daemon/registry/embedded_record_store.h:
// magic, size, SHA-256, serialized ModelRecord), so that bytes some other program put under
// the prefix are recognized as not a record, and one format is documented, not two. What is
// read back is untrusted: a value that does not decode, or whose record names another model
// or node than its key, is DataLoss naming the key.
//
// Writes are compare-and-set: Put and Remove succeed only while the name's record is as this
// store last read it with GetForUpdate (or wrote it); absent if never read. When another daemon
// wrote the name in between, they fail with Aborted (read again, decide again): two daemons
// that register one name at once never both succeed (a node whose new key is not the first of
// the name deletes it again), and a removal never deletes a registration it did not see.
// Replacing or removing another node's record deletes that node's key: with per-peer etcd
// roles etcd refuses it (PermissionDenied, naming the node whose daemon may).
//
// Records are at most `max_record_bytes` (`registry_max_record_size`, 1 MiB by default; etcd
// refuses requests above its --max-request-bytes, 1.5 MiB by default): a larger one is refused
// before it is written (ResourceExhausted), and one found in etcd is DataLoss naming the key and
// its size, never decoded (a forged 41 MiB record must not hold up a daemon). Larger models
// need both limits raised.
//
// Thread-safety: unlike RecordStore's minimum, every method may be called concurrently (the
// syncer and answers to unknown models read while a registration writes).
#ifndef METALOAD_DAEMON_REGISTRY_ETCD_ETCD_RECORD_STORE_H_
#define METALOAD_DAEMON_REGISTRY_ETCD_ETCD_RECORD_STORE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/registry/etcd/etcd_client.h"
#include "daemon/registry/record_store.h"

namespace metaload {

class EtcdRecordStore final : public SharedRecordStore {
 public:
  // Why a key under models/ that is not models/<node>/<model> is not read.
  static constexpr char kNotOfTheLayout[] =
      "not of the layout <prefix>models/<node>/<model> (models/<model>, the layout before per-node "
      "keys, is not read: register the model again)";
  // `etcd` must outlive this, and receive answers of `max_record_bytes` and more (else a
  // large record is refused by the transport: DataLoss all the same). `prefix`: the cluster's
  // key prefix, ending in '/'.
  EtcdRecordStore(EtcdClient* etcd, std::string prefix, uint64_t max_record_bytes);

  absl::StatusOr<StoredModels> Load() override;
  absl::Status Put(const v1::ModelRecord& record) override;
  absl::Status Remove(const std::string& name) override;
  std::string Describe() const override;

  // The key a model name's record holds, among the keys of every node that wrote the name.
  struct Claim {
    std::string key;   // <prefix>models/<node>/<name>
    std::string node;  // who wrote it (etcd's RBAC lets only that node's peer write the key)
    int64_t create_revision = 0;
    int64_t mod_revision = 0;
  };
  struct Listing {
    std::map<std::string, Claim> names;    // model name -> its record's key
    std::vector<mvccpb::KeyValue> strays;  // keys under models/ not of models/<node>/<name>
  };
  // Every model name and the key that holds it, without the (large) values: what a syncer
  // compares to find the records that changed.
  absl::StatusOr<Listing> List();
  // The record `claim` names as etcd holds it now; nullopt when the key is gone.
  absl::StatusOr<std::optional<StoredRecord>> Read(const Claim& claim);
  // The record of `name` as etcd holds it now; nullopt when there is none.
  absl::StatusOr<std::optional<StoredRecord>> Get(const std::string& name);
  // Get, remembering the key and revision read as the ones the next Put or Remove of `name`
  // expects. Call it before deciding on a change from what it returns (the registry's checks).
  absl::StatusOr<std::optional<StoredRecord>> GetForUpdate(const std::string& name) override;

  std::string KeyOf(const std::string& node, const std::string& name) const {
    return models_prefix_ + node + "/" + name;
  }

 private:
  absl::StatusOr<StoredRecord> Decode(const mvccpb::KeyValue& kv, const Claim& claim) const;
  absl::StatusOr<std::optional<Claim>> Find(const std::string& name);
  // What the next write of `name` expects: the claim read (nullopt: absent).
  std::optional<Claim> Expected(const std::string& name) const;
  // After `claim` was created: Aborted (and the key deleted) when another node's key of the
  // name was created before it.
  absl::Status KeepIfFirst(const std::string& name, const Claim& claim);
  // A write to `claim` (another node's key) that etcd refused: PermissionDenied naming the node
  // whose daemon may write it; other failures as they are.
  static absl::Status OthersKey(const absl::Status& status, const std::string& name, const Claim& claim);

  EtcdClient* const etcd_;
  const std::string models_prefix_;
  const uint64_t max_record_bytes_;
  mutable absl::Mutex mu_;
  // Model name -> the claim the next write of it expects (nullopt: absent).
  std::map<std::string, std::optional<Claim>> expected_ ABSL_GUARDED_BY(mu_);
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_REGISTRY_ETCD_ETCD_RECORD_STORE_H_
