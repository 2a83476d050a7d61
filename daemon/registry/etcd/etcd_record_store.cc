#include "daemon/registry/etcd/etcd_record_store.h"

#include "absl/strings/str_cat.h"
#include "daemon/registry/embedded_record_store.h"
#include "util/error_kind.h"
#include "util/identifiers.h"
#include "util/status_macros.h"

namespace metaload {

EtcdRecordStore::EtcdRecordStore(EtcdClient* etcd, std::string prefix, uint64_t max_record_bytes)
    : etcd_(etcd), models_prefix_(std::move(prefix) + "models/"), max_record_bytes_(max_record_bytes) {}

std::string EtcdRecordStore::Describe() const { return absl::StrCat(etcd_->Describe(), " ", models_prefix_); }

absl::StatusOr<StoredRecord> EtcdRecordStore::Decode(const mvccpb::KeyValue& kv) const {
  const std::string origin = absl::StrCat("etcd key ", QuoteForMessage(kv.key()));
  if (kv.value().size() > max_record_bytes_) {
    return absl::DataLossError(absl::StrCat(origin, ": a record of ", kv.value().size(),
                                            " bytes, above registry_max_record_size (", max_record_bytes_,
                                            " bytes): refused undecoded"));
  }
  ML_ASSIGN_OR_RETURN(v1::ModelRecord record, DecodeModelFile(kv.value(), origin));
  const std::string name = kv.key().substr(models_prefix_.size());
  if (record.name() != name) {
    return absl::DataLossError(absl::StrCat(origin, ": holds the record of model ",
                                            QuoteForMessage(record.name()), ", not of ",
                                            QuoteForMessage(name)));
  }
  return StoredRecord{origin, std::move(record)};
}

absl::StatusOr<std::map<std::string, int64_t>> EtcdRecordStore::Revisions() {
  ML_ASSIGN_OR_RETURN(std::vector<mvccpb::KeyValue> kvs,
                      etcd_->GetPrefix(models_prefix_, /*keys_only=*/true));
  std::map<std::string, int64_t> revisions;
  for (const mvccpb::KeyValue& kv : kvs)
    revisions[kv.key().substr(models_prefix_.size())] = kv.mod_revision();
  return revisions;
}

absl::StatusOr<std::optional<mvccpb::KeyValue>> EtcdRecordStore::Fetch(const std::string& name) {
  absl::StatusOr<std::optional<mvccpb::KeyValue>> kv = etcd_->Get(KeyOf(name));
  if (absl::IsResourceExhausted(kv.status())) {
    return absl::DataLossError(absl::StrCat("etcd key ", QuoteForMessage(KeyOf(name)),
                                            ": a record above registry_max_record_size (", max_record_bytes_,
                                            " bytes): refused unread (", kv.status().message(), ")"));
  }
  return kv;
}

absl::StatusOr<std::optional<StoredRecord>> EtcdRecordStore::Read(const std::string& name, bool for_update) {
  ML_ASSIGN_OR_RETURN(std::optional<mvccpb::KeyValue> kv, Fetch(name));
  if (for_update) {
    absl::MutexLock lock(&mu_);
    expected_revision_[name] = kv.has_value() ? kv->mod_revision() : 0;
  }
  if (!kv.has_value()) return std::nullopt;
  ML_ASSIGN_OR_RETURN(StoredRecord stored, Decode(*kv));
  return stored;
}

absl::StatusOr<std::optional<StoredRecord>> EtcdRecordStore::Get(const std::string& name) {
  return Read(name, /*for_update=*/false);
}

absl::StatusOr<std::optional<StoredRecord>> EtcdRecordStore::GetForUpdate(const std::string& name) {
  return Read(name, /*for_update=*/true);
}

int64_t EtcdRecordStore::Expected(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = expected_revision_.find(name);
  return it == expected_revision_.end() ? 0 : it->second;
}

absl::StatusOr<StoredModels> EtcdRecordStore::Load() {
  // Key by key: one Range of every value could exceed any message limit.
  ML_ASSIGN_OR_RETURN(auto revisions, Revisions());
  StoredModels models;
  for (const auto& [name, revision] : revisions) {
    absl::StatusOr<std::optional<mvccpb::KeyValue>> kv = Fetch(name);
    if (absl::IsDataLoss(kv.status())) {
      models.skipped.push_back(kv.status());
      continue;
    }
    ML_RETURN_IF_ERROR(kv.status());
    if (!kv->has_value()) continue;  // removed meanwhile
    absl::StatusOr<StoredRecord> stored = Decode(**kv);
    if (stored.ok()) {
      models.records.push_back(*std::move(stored));
    } else {
      models.skipped.push_back(stored.status());
    }
  }
  return models;
}

absl::Status EtcdRecordStore::Put(const v1::ModelRecord& record) {
  const std::string encoded = EncodeModelFile(record);
  if (encoded.size() > max_record_bytes_) {
    return TooLargeError(absl::StrCat("model ", record.name(), ": its record is ", encoded.size(),
                                      " bytes, above registry_max_record_size (", max_record_bytes_,
                                      " bytes); raise it, and etcd's --max-request-bytes above it"));
  }
  absl::StatusOr<int64_t> written =
      etcd_->PutIfUnchanged(KeyOf(record.name()), encoded, Expected(record.name()));
  absl::MutexLock lock(&mu_);
  if (written.ok()) {
    expected_revision_[record.name()] = *written;
  } else if (absl::IsAborted(written.status())) {
    expected_revision_.erase(record.name());  // unknown until read again
    return WithErrorKind(
        absl::AbortedError(absl::StrCat("model ", record.name(),
                                        " was registered or removed on another daemon meanwhile; try again")),
        ErrorKind::kBusy);
  }
  return written.status();
}

absl::Status EtcdRecordStore::Remove(const std::string& name) {
  absl::Status removed = etcd_->DeleteIfUnchanged(KeyOf(name), Expected(name));
  absl::MutexLock lock(&mu_);
  if (removed.ok()) {
    expected_revision_[name] = 0;
  } else if (absl::IsAborted(removed)) {
    expected_revision_.erase(name);
    return WithErrorKind(absl::AbortedError(absl::StrCat(
                             "model ", name, " was registered again on another daemon meanwhile; try again")),
                         ErrorKind::kBusy);
  }
  return removed;
}

}  // namespace metaload
