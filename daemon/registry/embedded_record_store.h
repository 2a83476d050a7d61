// The embedded RecordStore: registered models as files under the coordinator's `state_dir`
// (docs/node-config.md), for one machine or a small cluster with no etcd.
//
//   ML_ASSIGN_OR_RETURN(std::unique_ptr<EmbeddedRecordStore> store, EmbeddedRecordStore::Open(dir));
//   ML_ASSIGN_OR_RETURN(StoredModels stored, store->Load());
//
// Layout: `state_dir/LOCK` (flock: one coordinator per state_dir) and `state_dir/models/<name>.pb`,
// one file per model, so that registering one model rewrites that model only (a record may be
// hundreds of MB for millions of tensors) and a damaged file costs one model, not all.
//
// A file is written whole to `<name>.pb.tmp` in the same folder, fsynced, renamed over
// `<name>.pb`, and the folder fsynced: after a crash a model's file is the old one or the new
// one, never half of either; a leftover `.tmp` is removed by the next Load. Each file is
//
//   offset  0: "MLREC001"                  magic and format version (8 bytes)
//   offset  8: payload size, uint64 little-endian
//   offset 16: SHA-256 of the payload, 64 lowercase hex characters
//   offset 80: payload: a serialized metaload.v1.ModelRecord
//
// The digest matters: a truncated protobuf often parses, as a record with fewer tensors.
//
// It keeps the coordinator's member bindings too (daemon/membership/binding_store.h), one file
// per name, `state_dir/members/<node>.id`, written the same way: the identity, then "\n".
//
// Thread-safety: one caller at a time (RecordStore).
#ifndef METALOAD_DAEMON_REGISTRY_EMBEDDED_RECORD_STORE_H_
#define METALOAD_DAEMON_REGISTRY_EMBEDDED_RECORD_STORE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/membership/binding_store.h"
#include "daemon/registry/record_store.h"
#include "util/identifiers.h"

namespace metaload {

inline constexpr char kModelFileMagic[] = "MLREC001";
inline constexpr uint64_t kModelFileHeaderBytes = 8 + 8 + 64;
// The largest record file read back: a model of kMaxModelTensors (4 M) tensors at ~100 bytes
// each plus a 48 MiB skeleton is ~450 MB. Checked against the file's size before reading.
inline constexpr uint64_t kMaxModelFileBytes = uint64_t{1} << 30;
// An identity file's largest size: an identity (util/identifiers.h CheckIdentity) and "\n".
inline constexpr uint64_t kMaxIdentityFileBytes = kMaxIdentityBytes + 1;

class EmbeddedRecordStore final : public RecordStore, public BindingStore {
 public:
  // Creates `state_dir`, `state_dir/models` and `state_dir/members` (mode 0700) when missing; the parent of
  // `state_dir` must exist. FailedPrecondition when another process holds the state_dir's
  // lock (two coordinators must not write one registry); errno's meaning otherwise.
  static absl::StatusOr<std::unique_ptr<EmbeddedRecordStore>> Open(const std::string& state_dir);
  ~EmbeddedRecordStore() override;

  absl::StatusOr<StoredModels> Load() override;
  absl::Status Put(const v1::ModelRecord& record) override;
  absl::Status Remove(const std::string& name) override;
  std::string Describe() const override;

  absl::StatusOr<StoredBindings> LoadBindings() override;
  absl::Status PutBinding(const MemberBinding& binding) override;
  absl::Status RemoveBinding(const std::string& name) override;

  // The file that holds model `name`; the one that holds whose node `name` is.
  std::string PathOf(const std::string& name) const;
  std::string BindingPathOf(const std::string& name) const;

 private:
  EmbeddedRecordStore(std::string state_dir, int lock_fd);

  const std::string state_dir_;
  const std::string models_dir_;
  const std::string members_dir_;
  const int lock_fd_;
};

// The bytes of a record file (header and payload) and back; exposed for tests. DecodeModelFile
// errors are DataLoss naming `origin` and what is wrong, in the order checked: short header,
// magic, size (against kMaxModelFileBytes and the bytes present), digest, protobuf.
std::string EncodeModelFile(const v1::ModelRecord& record);
absl::StatusOr<v1::ModelRecord> DecodeModelFile(const std::string& bytes, const std::string& origin);

}  // namespace metaload

#endif  // METALOAD_DAEMON_REGISTRY_EMBEDDED_RECORD_STORE_H_
