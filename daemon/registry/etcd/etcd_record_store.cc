#include "daemon/registry/etcd/etcd_record_store.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "daemon/registry/embedded_record_store.h"
#include "util/error_kind.h"
#include "util/identifiers.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

absl::Status Busy(const std::string& message) {
  return WithErrorKind(absl::AbortedError(message), ErrorKind::kBusy);
}

}  // namespace

EtcdRecordStore::EtcdRecordStore(EtcdClient* etcd, std::string prefix, uint64_t max_record_bytes)
    : etcd_(etcd), models_prefix_(std::move(prefix) + "models/"), max_record_bytes_(max_record_bytes) {}

std::string EtcdRecordStore::Describe() const { return absl::StrCat(etcd_->Describe(), " ", models_prefix_); }

absl::StatusOr<StoredRecord> EtcdRecordStore::Decode(const mvccpb::KeyValue& kv, const Claim& claim) const {
  const std::string origin = absl::StrCat("etcd key ", QuoteForMessage(kv.key()));
  if (kv.value().size() > max_record_bytes_) {
    return absl::DataLossError(absl::StrCat(origin, ": a record of ", kv.value().size(),
                                            " bytes, above registry_max_record_size (", max_record_bytes_,
                                            " bytes): refused undecoded"));
  }
  ML_ASSIGN_OR_RETURN(v1::ModelRecord record, DecodeModelFile(kv.value(), origin));
  const std::string name = claim.key.substr(models_prefix_.size() + claim.node.size() + 1);
  if (record.name() != name) {
    return absl::DataLossError(absl::StrCat(origin, ": holds the record of model ",
                                            QuoteForMessage(record.name()), ", not of ",
                                            QuoteForMessage(name)));
  }
  // Only <node>'s peer may write models/<node>/ (per-peer etcd roles): the key says who
  // published it, and a record claiming another node is forged.
  if (record.registered_on() != claim.node) {
    return absl::DataLossError(absl::StrCat(origin, ": holds a record registered on node ",
                                            QuoteForMessage(record.registered_on()), ", under node ",
                                            QuoteForMessage(claim.node), "'s keys"));
  }
  return StoredRecord{origin, std::move(record)};
}

absl::StatusOr<EtcdRecordStore::Listing> EtcdRecordStore::List() {
  ML_ASSIGN_OR_RETURN(std::vector<mvccpb::KeyValue> kvs, etcd_->ListKeys(models_prefix_));
  Listing listing;
  for (mvccpb::KeyValue& kv : kvs) {
    const absl::string_view rest = absl::string_view(kv.key()).substr(models_prefix_.size());
    const size_t slash = rest.find('/');
    if (slash == absl::string_view::npos || !CheckName("node", rest.substr(0, slash)).ok() ||
        !CheckName("model", rest.substr(slash + 1)).ok()) {
      listing.strays.push_back(std::move(kv));
      continue;
    }
    Claim claim{kv.key(), std::string(rest.substr(0, slash)), kv.create_revision(), kv.mod_revision()};
    auto [it, inserted] = listing.names.emplace(std::string(rest.substr(slash + 1)), claim);
    // The key created first holds the name (ties cannot happen: one node's key per transaction).
    if (!inserted && claim.create_revision < it->second.create_revision) it->second = std::move(claim);
  }
  return listing;
}

absl::StatusOr<std::optional<StoredRecord>> EtcdRecordStore::Read(const Claim& claim) {
  absl::StatusOr<std::optional<mvccpb::KeyValue>> kv = etcd_->Get(claim.key);
  if (absl::IsResourceExhausted(kv.status())) {
    return absl::DataLossError(absl::StrCat("etcd key ", QuoteForMessage(claim.key),
                                            ": a record above registry_max_record_size (", max_record_bytes_,
                                            " bytes): refused unread (", kv.status().message(), ")"));
  }
  ML_RETURN_IF_ERROR(kv.status());
  if (!kv->has_value()) return std::nullopt;
  ML_ASSIGN_OR_RETURN(StoredRecord stored, Decode(**kv, claim));
  return stored;
}

absl::StatusOr<std::optional<EtcdRecordStore::Claim>> EtcdRecordStore::Find(const std::string& name) {
  ML_ASSIGN_OR_RETURN(Listing listing, List());
  auto it = listing.names.find(name);
  if (it == listing.names.end()) return std::nullopt;
  return std::move(it->second);
}

absl::StatusOr<std::optional<StoredRecord>> EtcdRecordStore::Get(const std::string& name) {
  ML_ASSIGN_OR_RETURN(std::optional<Claim> claim, Find(name));
  if (!claim.has_value()) return std::nullopt;
  return Read(*claim);
}

absl::StatusOr<std::optional<StoredRecord>> EtcdRecordStore::GetForUpdate(const std::string& name) {
  ML_ASSIGN_OR_RETURN(std::optional<Claim> claim, Find(name));
  {
    absl::MutexLock lock(&mu_);
    expected_[name] = claim;
  }
  if (!claim.has_value()) return std::nullopt;
  return Read(*claim);
}

std::optional<EtcdRecordStore::Claim> EtcdRecordStore::Expected(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = expected_.find(name);
  return it == expected_.end() ? std::nullopt : it->second;
}

absl::StatusOr<StoredModels> EtcdRecordStore::Load() {
  // Key by key: one Range of every value could exceed any message limit.
  ML_ASSIGN_OR_RETURN(Listing listing, List());
  StoredModels models;
  for (const mvccpb::KeyValue& stray : listing.strays) {
    models.skipped.push_back(
        absl::DataLossError(absl::StrCat("etcd key ", QuoteForMessage(stray.key()), ": ", kNotOfTheLayout)));
  }
  for (const auto& [name, claim] : listing.names) {
    absl::StatusOr<std::optional<StoredRecord>> stored = Read(claim);
    if (absl::IsDataLoss(stored.status())) {
      models.skipped.push_back(stored.status());
      continue;
    }
    ML_RETURN_IF_ERROR(stored.status());
    if (stored->has_value()) models.records.push_back(**std::move(stored));
  }
  return models;
}

absl::Status EtcdRecordStore::OthersKey(const absl::Status& status, const std::string& name,
                                        const Claim& claim) {
  if (!absl::IsPermissionDenied(status)) return status;
  return absl::PermissionDeniedError(absl::StrCat(
      "model ", name, " is registered on node ", claim.node, " (etcd key ", QuoteForMessage(claim.key),
      ") and etcd refused this peer's write (", status.message(), "): with per-peer etcd roles only node ",
      claim.node, "'s daemon replaces or unregisters it"));
}

absl::Status EtcdRecordStore::Put(const v1::ModelRecord& record) {
  const std::string& name = record.name();
  const std::string encoded = EncodeModelFile(record);
  if (encoded.size() > max_record_bytes_) {
    return TooLargeError(absl::StrCat("model ", name, ": its record is ", encoded.size(),
                                      " bytes, above registry_max_record_size (", max_record_bytes_,
                                      " bytes); raise it, and etcd's --max-request-bytes above it"));
  }
  const std::string key = KeyOf(record.registered_on(), name);
  const std::optional<Claim> expected = Expected(name);
  const bool creates = !expected.has_value() || expected->key != key;
  absl::StatusOr<int64_t> written =
      !creates || !expected.has_value()
          ? etcd_->PutIfUnchanged(key, encoded, expected.has_value() ? expected->mod_revision : 0)
          : etcd_->MoveIfUnchanged(expected->key, expected->mod_revision, key, encoded);
  if (!written.ok()) {
    absl::MutexLock lock(&mu_);
    expected_.erase(name);  // unknown until read again
    if (absl::IsAborted(written.status())) {
      return Busy(
          absl::StrCat("model ", name, " was registered or removed on another daemon meanwhile; try again"));
    }
    return creates && expected.has_value() ? OthersKey(written.status(), name, *expected) : written.status();
  }
  Claim mine{key, record.registered_on(), creates ? *written : expected->create_revision, *written};
  if (creates) {
    ML_RETURN_IF_ERROR(KeepIfFirst(name, mine));
  }
  absl::MutexLock lock(&mu_);
  expected_[name] = std::move(mine);
  return absl::OkStatus();
}

absl::Status EtcdRecordStore::KeepIfFirst(const std::string& name, const Claim& mine) {
  // Unread (etcd unreachable): the write stands; if another key came first, every peer's
  // syncer applies that one, this daemon's included.
  absl::StatusOr<std::optional<Claim>> first = Find(name);
  if (first.ok() && first->has_value() && (*first)->key != mine.key) {
    // Another node created its key of the name first (both read it absent): its record stands.
    absl::Status deleted = etcd_->DeleteIfUnchanged(mine.key, mine.mod_revision);
    absl::MutexLock lock(&mu_);
    expected_.erase(name);
    return Busy(absl::StrCat("model ", name, " was registered on node ", (*first)->node,
                             " meanwhile; try again",
                             deleted.ok() ? "" : absl::StrCat(" (", deleted.message(), ")")));
  }
  return absl::OkStatus();
}

absl::Status EtcdRecordStore::Remove(const std::string& name) {
  const std::optional<Claim> expected = Expected(name);
  absl::Status removed;
  if (expected.has_value()) {
    removed = etcd_->DeleteIfUnchanged(expected->key, expected->mod_revision);
  } else {
    // Read absent: still absent?
    absl::StatusOr<std::optional<Claim>> now = Find(name);
    removed = !now.ok()          ? now.status()
              : now->has_value() ? absl::AbortedError("written since")
                                 : absl::OkStatus();
  }
  absl::MutexLock lock(&mu_);
  if (removed.ok()) {
    expected_[name] = std::nullopt;
    return absl::OkStatus();
  }
  expected_.erase(name);
  if (absl::IsAborted(removed)) {
    return Busy(absl::StrCat("model ", name, " was registered again on another daemon meanwhile; try again"));
  }
  return expected.has_value() ? OthersKey(removed, name, *expected) : removed;
}

}  // namespace metaload
