#include "daemon/registry/etcd_model_store.h"

#include "absl/strings/str_cat.h"
#include "daemon/registry/embedded_model_store.h"
#include "util/identifiers.h"
#include "util/status_macros.h"

namespace metaload {

EtcdModelStore::EtcdModelStore(EtcdClient* etcd, std::string prefix)
    : etcd_(etcd), models_prefix_(std::move(prefix) + "models/") {}

std::string EtcdModelStore::Describe() const { return absl::StrCat(etcd_->Describe(), " ", models_prefix_); }

absl::StatusOr<StoredRecord> EtcdModelStore::Decode(const mvccpb::KeyValue& kv) const {
  const std::string origin = absl::StrCat("etcd key ", QuoteForMessage(kv.key()));
  ML_ASSIGN_OR_RETURN(v1::ModelRecord record, DecodeModelFile(kv.value(), origin));
  const std::string name = kv.key().substr(models_prefix_.size());
  if (record.name() != name) {
    return absl::DataLossError(absl::StrCat(origin, ": holds the record of model ",
                                            QuoteForMessage(record.name()), ", not of ",
                                            QuoteForMessage(name)));
  }
  return StoredRecord{origin, std::move(record)};
}

absl::StatusOr<std::map<std::string, int64_t>> EtcdModelStore::Revisions() {
  ML_ASSIGN_OR_RETURN(std::vector<mvccpb::KeyValue> kvs,
                      etcd_->GetPrefix(models_prefix_, /*keys_only=*/true));
  std::map<std::string, int64_t> revisions;
  for (const mvccpb::KeyValue& kv : kvs)
    revisions[kv.key().substr(models_prefix_.size())] = kv.mod_revision();
  return revisions;
}

absl::StatusOr<std::optional<StoredRecord>> EtcdModelStore::Get(const std::string& name) {
  ML_ASSIGN_OR_RETURN(std::optional<mvccpb::KeyValue> kv, etcd_->Get(KeyOf(name)));
  if (!kv.has_value()) return std::nullopt;
  ML_ASSIGN_OR_RETURN(StoredRecord stored, Decode(*kv));
  return stored;
}

absl::StatusOr<StoredModels> EtcdModelStore::Load() {
  // Key by key: one Range of every value could exceed any message limit.
  ML_ASSIGN_OR_RETURN(auto revisions, Revisions());
  StoredModels models;
  for (const auto& [name, revision] : revisions) {
    ML_ASSIGN_OR_RETURN(std::optional<mvccpb::KeyValue> kv, etcd_->Get(KeyOf(name)));
    if (!kv.has_value()) continue;  // removed meanwhile
    absl::StatusOr<StoredRecord> stored = Decode(*kv);
    if (stored.ok()) {
      models.records.push_back(*std::move(stored));
    } else {
      models.skipped.push_back(stored.status());
    }
  }
  return models;
}

absl::Status EtcdModelStore::Put(const v1::ModelRecord& record) {
  return etcd_->Put(KeyOf(record.name()), EncodeModelFile(record));
}

absl::Status EtcdModelStore::Remove(const std::string& name) { return etcd_->Delete(KeyOf(name)); }

}  // namespace metaload
