// The models a coordinator (or an etcd peer) serves: each record (proto/model_record.h) with
// what is parsed from it once, under its name. Every change comes through one Put, whose
// origin says where the record came from and so how it is taken; Remove and Drop take a name
// out. Pure data plus a RecordStore (registry/record_store.h) that, once attached, persists
// every change before memory sees it.
//
//   ModelRegistry registry(ModelRegistry::Options{});
//   ML_RETURN_IF_ERROR(registry.Put(record, RecordOrigin::kRegister, /*replace=*/false));
//   ML_ASSIGN_OR_RETURN(std::shared_ptr<const RegisteredModel> model, registry.Find("llama"));
//
// Thread-safety: every method may be called concurrently. Changes are serialized (change_mu_,
// held across check, persist and apply); lookups take only mu_, which is never held during a
// store's (slow) write, so plans are answered meanwhile.
#ifndef METALOAD_DAEMON_REGISTRY_MODEL_REGISTRY_H_
#define METALOAD_DAEMON_REGISTRY_MODEL_REGISTRY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/registry/record_store.h"
#include "daemon/requests/request_limits.h"
#include "daemon/serving/served_ranges.h"
#include "planner/skeleton/skeleton.h"
#include "proto/model_record.h"

namespace metaload {

// A registered model as the registry holds it: the record and what was parsed from it once.
struct RegisteredModel {
  RegisteredModel() = default;
  // Not copied: `served` may point into `record` (model_registry.cc).
  RegisteredModel(const RegisteredModel&) = delete;
  RegisteredModel& operator=(const RegisteredModel&) = delete;

  ModelRecord record;
  Skeleton skeleton;
  // What a daemon may stream of it: its tensors' bytes; checked against each file's own header
  // unless this daemon registered it (kRegister), and against the stamps of its files where this
  // node registered it (served_ranges.h).
  ServedRanges served;
  uint64_t version = 0;       // changes whenever the name is registered anew
  uint64_t record_bytes = 0;  // its record's wire size (Options::max_record_bytes)
};

// Where a record handed to Put comes from.
enum class RecordOrigin {
  kRegister,  // a RegisterModel this daemon prepared
  kPublish,   // a PublishModel by an admin (a node agent forwarding --replace)
  // A PublishModel with a member's credentials (a node agent publishing what was registered on
  // it): it may add a name, and change only a record registered on its own node
  // (record.registered_on, which the caller checked is the publisher's: node_restriction.h).
  kMemberPublish,
  kRestore,         // read back from the store at start, before it is attached
  kSharedRegistry,  // another peer wrote it to the shared registry (etcd)
};

class ModelRegistry {
 public:
  struct Options {
    // What any record may add, whatever its origin (node config keys of the same names): a
    // record from etcd or a state_dir file is counted like a registration (issue 23). At most
    // the hard caps kMaxModels and kMaxModelTensors (request_limits.h).
    int max_models = kMaxModels;
    int64_t max_tensors_per_model = kMaxModelTensors;
    // The records held together, by their wire size (node config max_registry_size): one that
    // would pass it is ResourceExhausted.
    uint64_t max_record_bytes = uint64_t{1} << 30;
    // Every record, whatever its origin, carries every checkpoint tensor's digest (node config
    // require_digests): one without is FailedPrecondition.
    bool require_digests = false;
    // This daemon's node name: a record whose registered_on it is (restored from state_dir or
    // etcd after a restart) carries stamps this host made, which a ReadRange's file must match
    // (device and inode included). Empty: only kRegister records are taken as this host's.
    std::string node;
  };

  explicit ModelRegistry(Options options);

  // From now on, every Put of kRegister, kPublish or kMemberPublish and every Remove is written to `store`
  // before it takes effect in memory; a failed write fails the call and changes nothing.
  // `store` must outlive this; attach it before the models can change (a coordinator attaches
  // it once its models are restored).
  void AttachStore(RecordStore* store);

  // Adds `record` under its name. REQUIRES: CheckModelRecord passed for its wire form.
  // Every origin: ResourceExhausted, naming the node config key, past max_models or
  // max_tensors_per_model (checkpoint or skeleton tensors). `sent_by` says who sent a record
  // this daemon did not build (every origin but kRegister), whose files are then checked
  // against their own headers before a byte is served (served_ranges.h).
  // By origin:
  //  - kRegister, kPublish, kMemberPublish: AlreadyExists when the name is registered with
  //    another checkpoint, skeleton or policy, unless `replace`; the same registration with its
  //    files stated anew, its config.json read anew or its digests computed anew replaces the
  //    old one without (a refresh); the same record again (files, digests and config.json
  //    included) is accepted and changes nothing. The store's error, with context, when it
  //    cannot be persisted.
  //  - kMemberPublish besides: PermissionDenied when the name holds a record registered on
  //    another node and this is not the same record again: a member never refreshes, replaces
  //    or strips another's (an admin's) record.
  //  - kRestore: memory only; a name already held with another registration is AlreadyExists.
  //  - kSharedRegistry: memory only, replacing what is held under the name; the same record
  //    again changes nothing (cached plans stay valid).
  // Every origin: ResourceExhausted naming max_registry_size when the records held, this one in
  // place of what the name holds, would pass it.
  // Every origin: FailedPrecondition, naming a tensor and the key, under require_digests when
  // a checkpoint tensor has no digest.
  // Every origin: InvalidArgument for a skeleton that does not parse. `parsed`, when given, is
  // the skeleton record.skeleton_json was made from (registration has it), held instead of
  // parsing the JSON again (a quarter of a 90k-tensor registration).
  absl::Status Put(const ModelRecord& record, RecordOrigin origin, bool replace = false,
                   const Skeleton* parsed = nullptr, const std::string& sent_by = "");
  // Unregisters `name`: NotFound naming the registered models when there is none; the store's
  // error when the removal cannot be persisted.
  absl::Status Remove(const std::string& name);
  // Forgets `name` in memory only (another peer removed it from the shared registry, or it
  // could not be served after all); false when it was not held.
  bool Drop(const std::string& name);

  // The model `name`, or NotFound naming the registered models.
  absl::StatusOr<std::shared_ptr<const RegisteredModel>> Find(const std::string& name) const;
  // The bytes a daemon may serve of `name` (ReadRange); Find's errors.
  absl::StatusOr<std::shared_ptr<const ServedRanges>> ServedRangesOf(const std::string& name) const;
  std::vector<std::shared_ptr<const RegisteredModel>> Models() const;  // sorted by name
  std::vector<std::string> Names() const;                              // sorted

 private:
  absl::StatusOr<std::shared_ptr<const RegisteredModel>> FindLocked(const std::string& name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets `name` and its record's bytes; false when it was not held.
  bool EraseLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  // One change of the registry at a time, held across check, persist and apply, so that what
  // was checked is still true when it is applied. Taken before mu_.
  absl::Mutex change_mu_;
  RecordStore* store_ ABSL_GUARDED_BY(change_mu_) = nullptr;
  mutable absl::Mutex mu_ ABSL_ACQUIRED_AFTER(change_mu_);
  std::map<std::string, std::shared_ptr<const RegisteredModel>> models_ ABSL_GUARDED_BY(mu_);
  uint64_t next_version_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t record_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of the models held, together
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_REGISTRY_MODEL_REGISTRY_H_
