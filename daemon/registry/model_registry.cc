#include "daemon/registry/model_registry.h"

#include "absl/strings/str_cat.h"
#include "proto/convert.h"
#include "util/error_kind.h"
#include "util/identifiers.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// The same registration again (from any node): same folder, skeleton, policy and layout; and
// `exactly`, the files as they were then, the same config.json and the same digests (or none).
// Records that differ only in file stats, config.json or digests are the same registration
// made anew (a refresh, or one with or without digests): its owner replaces the old one
// without --replace. Which node registered it is not compared: the same record from another
// node changes nothing.
bool SameRecord(const ModelRecord& a, const ModelRecord& b, bool exactly) {
  const bool with_file_stats = exactly;
  const std::vector<TensorLayout>& x_tensors = a.checkpoint.tensors;
  const std::vector<TensorLayout>& y_tensors = b.checkpoint.tensors;
  if (a.checkpoint.dir != b.checkpoint.dir || a.skeleton_json != b.skeleton_json ||
      a.init_missing != b.init_missing || a.allow_unexpected != b.allow_unexpected ||
      x_tensors.size() != y_tensors.size() ||
      (with_file_stats && a.file_stats.size() != b.file_stats.size()) ||
      (exactly && a.hf_config_json != b.hf_config_json)) {
    return false;
  }
  for (size_t i = 0; with_file_stats && i < a.file_stats.size(); ++i) {
    const RegisteredFile& x = a.file_stats[i];
    const RegisteredFile& y = b.file_stats[i];
    if (x.file != y.file || x.stamp != y.stamp) return false;
  }
  for (size_t i = 0; i < x_tensors.size(); ++i) {
    const TensorLayout& x = x_tensors[i];
    const TensorLayout& y = y_tensors[i];
    if (x.name != y.name || x.dtype != y.dtype || x.file != y.file || x.begin_offset != y.begin_offset ||
        x.end_offset != y.end_offset || x.shape != y.shape) {
      return false;
    }
    if (exactly && x.digest != y.digest) return false;
  }
  return true;
}

// Under require_digests a record without every digest would let a rank load bytes it cannot
// prove (issue 35: a member stripped them, and zeros verified).
absl::Status CheckEveryTensorDigested(const ModelRecord& record) {
  size_t missing = 0;
  const TensorLayout* first = nullptr;
  for (const TensorLayout& tensor : record.checkpoint.tensors) {
    if (tensor.digest.has_value()) continue;
    if (first == nullptr) first = &tensor;
    ++missing;
  }
  if (first == nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "model ", QuoteForMessage(record.name), ": ", missing, " of its ", record.checkpoint.tensors.size(),
      " tensors have no digest (", QuoteForMessage(first->name), missing > 1 ? ", ..." : "",
      "), and this daemon holds only models whose every tensor has one (require_digests in its node ",
      "config): register it without --no-digest"));
}

}  // namespace

ModelRegistry::ModelRegistry(Options options) : options_(options) {}

void ModelRegistry::AttachStore(RecordStore* store) {
  absl::MutexLock change(&change_mu_);
  store_ = store;
}

absl::Status ModelRegistry::Put(const ModelRecord& record, RecordOrigin origin, bool replace,
                                const Skeleton* parsed, const std::string& sent_by) {
  // How each origin is taken: whether it is written to the store, and whether it replaces what
  // the name holds. Every origin is bound by this node's limits.
  bool persist = false;
  switch (origin) {
    case RecordOrigin::kRegister:
    case RecordOrigin::kPublish:
      persist = true;
      break;
    case RecordOrigin::kMemberPublish:
      persist = true;
      replace = false;  // an admin's decision (the service refuses it to a member before this)
      break;
    case RecordOrigin::kRestore:
      replace = false;
      break;
    case RecordOrigin::kSharedRegistry: {
      absl::MutexLock lock(&mu_);
      auto it = models_.find(record.name);
      if (it != models_.end() && SameRecord(it->second->record, record, /*exactly=*/true)) {
        return absl::OkStatus();
      }
      replace = true;
      break;
    }
  }
  // Before the skeleton is parsed: parsing is what costs (a 200k-tensor skeleton, ~300 MiB).
  // Records from etcd and state_dir count too (issue 23: forged etcd records ignored the limits).
  const size_t tensors = record.checkpoint.tensors.size();
  if (tensors > static_cast<uint64_t>(options_.max_tensors_per_model)) {
    return TooLargeError(absl::StrCat(
        "model ", record.name, " has ", tensors, " tensors; this daemon registers at most ",
        options_.max_tensors_per_model, " per model (max_tensors_per_model in its node config)"));
  }
  if (options_.require_digests) ML_RETURN_IF_ERROR(CheckEveryTensorDigested(record));
  auto model = std::make_shared<RegisteredModel>();
  model->record = record;
  const v1::ModelRecord wire = ModelRecordToProto(record);  // its size, and what the store writes
  model->record_bytes = wire.ByteSizeLong();
  if (parsed != nullptr) {
    model->skeleton = *parsed;
  } else {
    ML_ASSIGN_OR_RETURN(model->skeleton, ParseSkeletonJson(record.skeleton_json, record.name));
  }
  // The skeleton is held too (issue 23: a 20,000-tensor skeleton beside one checkpoint tensor
  // passed a limit of 10); its parse was bounded by max_request_size.
  if (const size_t skeleton_tensors = model->skeleton.tensors.size();
      skeleton_tensors > static_cast<uint64_t>(options_.max_tensors_per_model)) {
    return TooLargeError(absl::StrCat("model ", record.name, "'s skeleton has ", skeleton_tensors,
                                      " tensors; this daemon registers at most ",
                                      options_.max_tensors_per_model,
                                      " per model (max_tensors_per_model in its node config)"));
  }
  // Stamps this host made: a file served must be the very one (device, inode, ctime), not
  // another renamed over it. Another node's are of its host (ranks compare size and mtime).
  HostStamps registered;
  if (origin == RecordOrigin::kRegister ||
      (!options_.node.empty() && record.registered_on == options_.node)) {
    for (const RegisteredFile& file : record.file_stats) registered[file.file] = file.stamp;
  }
  if (origin == RecordOrigin::kRegister) {
    model->served = ServedRanges(record.name, model->record.checkpoint, std::move(registered));
  } else {
    // Not this daemon's own reading: checked against the files before a byte is served. The
    // checkpoint is the model's own (an owner-less pointer: `served` lives and dies with it).
    model->served = ServedRanges(
        record.name,
        std::shared_ptr<const Checkpoint>(std::shared_ptr<const Checkpoint>(), &model->record.checkpoint),
        sent_by.empty() ? "an unnamed sender" : sent_by, std::move(registered));
  }
  absl::MutexLock change(&change_mu_);
  {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(record.name);
    if (it != models_.end()) {
      if (persist && SameRecord(it->second->record, record, /*exactly=*/true)) return absl::OkStatus();
      // Issue 35: a member re-publishing an admin's model with its digests stripped or its
      // config.json swapped was taken as a refresh, and every rank loaded it "verified".
      if (origin == RecordOrigin::kMemberPublish &&
          it->second->record.registered_on != record.registered_on) {
        return absl::PermissionDeniedError(absl::StrCat(
            "model \"", record.name, "\" is registered on node ", it->second->record.registered_on, "; node ",
            record.registered_on, "'s member may not change it (only what is registered on ",
            "its own node): an admin replaces it with `metactl register --replace`"));
      }
      // The same registration with its files stated anew (rewritten in place since, or a record
      // older than file stats) or its digests computed anew, added or dropped replaces the old
      // one without --replace: a refresh.
      if (!replace && !SameRecord(it->second->record, record, /*exactly=*/false)) {
        return absl::AlreadyExistsError(absl::StrCat(
            "model \"", record.name, "\" is already registered from ", it->second->record.checkpoint.dir,
            " (on node ", it->second->record.registered_on, "); pass --replace to register ",
            record.checkpoint.dir, " under this name, or `metactl unregister ", record.name, "` first"));
      }
    }
    // Issue 35: 256 published models of 100k tensors were allowed, ~23 GiB.
    const uint64_t replaced = it != models_.end() ? it->second->record_bytes : 0;
    if (record_bytes_ - replaced + model->record_bytes > options_.max_record_bytes) {
      return WithErrorKind(
          absl::ResourceExhaustedError(absl::StrCat(
              "the models registered hold ", record_bytes_, " bytes of records, and model ", record.name,
              "'s ", model->record_bytes, " would pass the ", options_.max_record_bytes,
              " this daemon holds (max_registry_size in its node config); unregister some")),
          ErrorKind::kFailure);
    }
    if (it == models_.end() && models_.size() >= static_cast<size_t>(options_.max_models)) {
      // Full until someone unregisters: state to fix, not "busy, try again".
      return WithErrorKind(
          absl::ResourceExhaustedError(absl::StrCat(
              models_.size(), " models are registered, the most this daemon holds (max_models in its ",
              "node config); unregister some")),
          ErrorKind::kFailure);
    }
  }
  if (persist && store_ != nullptr) {
    if (absl::Status stored = store_->Put(wire); !stored.ok()) {
      return Annotate(stored, absl::StrCat("model ", record.name, " not registered: persisting it in ",
                                           store_->Describe()));
    }
  }
  absl::MutexLock lock(&mu_);
  model->version = next_version_++;
  std::shared_ptr<const RegisteredModel>& held = models_[record.name];
  record_bytes_ = record_bytes_ - (held != nullptr ? held->record_bytes : 0) + model->record_bytes;
  held = std::move(model);
  return absl::OkStatus();
}

absl::Status ModelRegistry::Remove(const std::string& name) {
  absl::MutexLock change(&change_mu_);
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::shared_ptr<const RegisteredModel>> found = FindLocked(name);
    if (!found.ok()) return found.status();
  }
  if (store_ != nullptr) {
    if (absl::Status removed = store_->Remove(name); !removed.ok()) {
      return Annotate(
          removed, absl::StrCat("model ", name, " not unregistered: removing it from ", store_->Describe()));
    }
  }
  absl::MutexLock lock(&mu_);
  EraseLocked(name);
  return absl::OkStatus();
}

bool ModelRegistry::Drop(const std::string& name) {
  absl::MutexLock change(&change_mu_);
  absl::MutexLock lock(&mu_);
  return EraseLocked(name);
}

bool ModelRegistry::EraseLocked(const std::string& name) {
  auto it = models_.find(name);
  if (it == models_.end()) return false;
  record_bytes_ -= it->second->record_bytes;
  models_.erase(it);
  return true;
}

absl::StatusOr<std::shared_ptr<const RegisteredModel>> ModelRegistry::FindLocked(
    const std::string& name) const {
  auto it = models_.find(name);
  if (it != models_.end()) return it->second;
  std::string known;
  for (const auto& [n, m] : models_) absl::StrAppend(&known, known.empty() ? "" : ", ", n);
  return absl::NotFoundError(absl::StrCat("no model ", QuoteForMessage(name), " is registered (registered: ",
                                          known.empty() ? "none" : known, ")"));
}

absl::StatusOr<std::shared_ptr<const RegisteredModel>> ModelRegistry::Find(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  return FindLocked(name);
}

absl::StatusOr<std::shared_ptr<const ServedRanges>> ModelRegistry::ServedRangesOf(
    const std::string& name) const {
  ML_ASSIGN_OR_RETURN(std::shared_ptr<const RegisteredModel> model, Find(name));
  return std::shared_ptr<const ServedRanges>(model, &model->served);  // shares the model's lifetime
}

std::vector<std::shared_ptr<const RegisteredModel>> ModelRegistry::Models() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<const RegisteredModel>> out;
  for (const auto& [name, model] : models_) out.push_back(model);
  return out;
}

std::vector<std::string> ModelRegistry::Names() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [name, model] : models_) out.push_back(name);
  return out;
}

}  // namespace metaload
