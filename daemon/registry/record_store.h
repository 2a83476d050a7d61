// Where the coordinator keeps registered models so that they outlive its process: one
// interface, so that the registry (model_registry.h) does not care whether the records sit in files on this
// machine (daemon/registry/embedded_record_store.h, the default) or in etcd
// (daemon/registry/etcd/etcd_record_store.h, shared by peers).
//
// A store holds ModelRecords by name and nothing else: members are not persisted (they re-join
// within member_timeout; whose each name is, is: daemon/membership/binding_store.h), plans are
// recomputed. What a store returns from Load is untrusted
// input: the caller validates every record as it would a RegisterModel request before using it.
//
// Thread-safety: implementations may assume one caller at a time (ModelRegistry serializes
// every change of the registry), SharedRecordStore's excepted.
#ifndef METALOAD_DAEMON_REGISTRY_RECORD_STORE_H_
#define METALOAD_DAEMON_REGISTRY_RECORD_STORE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/metaload.pb.h"

namespace metaload {

// One record as read back, with where it was read from (a file, a key), for log lines.
struct StoredRecord {
  std::string origin;
  v1::ModelRecord record;
};

struct StoredModels {
  std::vector<StoredRecord> records;  // sorted by name
  // Each entry that could not be read (truncated, corrupted, unparsable), naming its origin.
  // Skipped entries are not fatal: the other models are still served.
  std::vector<absl::Status> skipped;
};

class RecordStore {
 public:
  virtual ~RecordStore() = default;

  // Every record held. An error only when the store itself cannot be read (then nothing is
  // served from it); a bad entry is reported in `skipped` instead.
  virtual absl::StatusOr<StoredModels> Load() = 0;
  // Stores `record` under its name, replacing any record of that name, durably: when this
  // returns OK the record survives a crash of the process or the machine; when it fails the
  // previous record (or none) is still what Load returns.
  virtual absl::Status Put(const v1::ModelRecord& record) = 0;
  // Removes the record of `name`, durably; OK when there was none.
  virtual absl::Status Remove(const std::string& name) = 0;
  // For log lines: "state_dir /var/lib/metaload".
  virtual std::string Describe() const = 0;
};

// A store other daemons write too (etcd, registry/etcd/etcd_record_store.h): before deciding
// on a change of a name, a daemon reads what the store holds under it now, and the change is
// written only if nobody wrote the name in between.
class SharedRecordStore : public RecordStore {
 public:
  // The record of `name` as the store holds it now; nullopt when it holds none. The next Put
  // or Remove of the name expects it unchanged (Aborted otherwise). Blocks.
  virtual absl::StatusOr<std::optional<StoredRecord>> GetForUpdate(const std::string& name) = 0;
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_REGISTRY_RECORD_STORE_H_
