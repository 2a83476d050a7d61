// The etcd RecordStore: registered models as keys in etcd, shared by every daemon of a cluster
// configured with `registry: etcd://...` (docs/node-config.md). Any daemon may write; every
// daemon reads the others' writes back (daemon/registry/etcd/etcd_syncer.h).
//
//   EtcdClient etcd({"127.0.0.1:2379"});
//   EtcdRecordStore store(&etcd, "/metaload/");
//   ML_RETURN_IF_ERROR(store.Put(record));          // key /metaload/models/<name>
//
// Each value is the bytes of an embedded record file (daemon/registry/embedded_record_store.h:
// magic, size, SHA-256, serialized ModelRecord), so that bytes some other program put under
// the prefix are recognized as not a record, and one format is documented, not two. What is
// read back is untrusted: a value that does not decode, or whose record names another model
// than its key, is DataLoss naming the key.
//
// Writes are compare-and-set: Put and Remove succeed only while the key is as this store last
// read it with GetForUpdate (or wrote it); absent if never read. When another daemon wrote
// the name in between, they fail with Aborted (read again, decide again): two daemons that
// register one name at once never both succeed, and a removal never deletes a registration it
// did not see.
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

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/registry/etcd/etcd_client.h"
#include "daemon/registry/record_store.h"

namespace metaload {

class EtcdRecordStore final : public SharedRecordStore {
 public:
  // `etcd` must outlive this, and receive answers of `max_record_bytes` and more (else a
  // large record is refused by the transport: DataLoss all the same). `prefix`: the cluster's
  // key prefix, ending in '/'.
  EtcdRecordStore(EtcdClient* etcd, std::string prefix, uint64_t max_record_bytes);

  absl::StatusOr<StoredModels> Load() override;
  absl::Status Put(const v1::ModelRecord& record) override;
  absl::Status Remove(const std::string& name) override;
  std::string Describe() const override;

  // The record of `name` as etcd holds it now; nullopt when there is none.
  absl::StatusOr<std::optional<StoredRecord>> Get(const std::string& name);
  // Get, remembering the revision read as the one the next Put or Remove of `name` expects.
  // Call it before deciding on a change from what it returns (the registry's checks).
  absl::StatusOr<std::optional<StoredRecord>> GetForUpdate(const std::string& name) override;
  // Every model name with the revision of its last write, without the (large) values: what a
  // syncer compares to find the records that changed.
  absl::StatusOr<std::map<std::string, int64_t>> Revisions();

  std::string KeyOf(const std::string& name) const { return models_prefix_ + name; }

 private:
  // etcd's Get of `name`'s key; an answer too large to receive is DataLoss naming the key.
  absl::StatusOr<std::optional<mvccpb::KeyValue>> Fetch(const std::string& name);
  absl::StatusOr<StoredRecord> Decode(const mvccpb::KeyValue& kv) const;
  absl::StatusOr<std::optional<StoredRecord>> Read(const std::string& name, bool for_update);
  int64_t Expected(const std::string& name) const;

  EtcdClient* const etcd_;
  const std::string models_prefix_;
  const uint64_t max_record_bytes_;
  mutable absl::Mutex mu_;
  // Model name -> the mod_revision the next write of it expects (0: absent).
  std::map<std::string, int64_t> expected_revision_ ABSL_GUARDED_BY(mu_);
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_REGISTRY_ETCD_ETCD_RECORD_STORE_H_
