#include "daemon/registry/etcd/etcd_syncer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/requests/request_checks.h"
#include "util/identifiers.h"
#include "util/log.h"
#include "util/status_macros.h"

namespace metaload {

EtcdSyncer::EtcdSyncer(EtcdClient* etcd, EtcdRecordStore* store, v1::NodeInfo self, Options options,
                       Sink sink)
    : etcd_(etcd),
      store_(store),
      self_(std::move(self)),
      options_(std::move(options)),
      sink_(std::move(sink)),
      members_prefix_(options_.prefix + "members/") {}

EtcdSyncer::~EtcdSyncer() { Stop(); }

void EtcdSyncer::StopRenewals() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (renewal_thread_.joinable()) renewal_thread_.join();
}

void EtcdSyncer::Stop() {
  StopRenewals();
  if (sync_thread_.joinable()) sync_thread_.join();
}

bool EtcdSyncer::Stopping() {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_;
}

bool EtcdSyncer::WaitOrStop(absl::Duration how_long) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, absl::ToChronoNanoseconds(how_long), [this] { return stop_; });
}

absl::Status EtcdSyncer::Join() {
  ML_RETURN_IF_ERROR(WaitUntilNameIsFree());
  return PutMember();
}

absl::Status EtcdSyncer::WaitUntilNameIsFree() {
  const std::string key = members_prefix_ + self_.name();
  // A predecessor of this daemon that was killed (on another port) holds the key until its
  // lease expires: wait that long before calling the name taken.
  const absl::Time deadline = absl::Now() + options_.member_ttl + absl::Seconds(1);
  while (true) {
    ML_ASSIGN_OR_RETURN(std::optional<mvccpb::KeyValue> kv, etcd_->Get(key));
    v1::NodeInfo holder;
    if (!kv.has_value() || !holder.ParseFromString(kv->value()) || holder.address() == self_.address()) {
      return absl::OkStatus();
    }
    if (absl::Now() >= deadline) {
      return absl::FailedPreconditionError(
          absl::StrCat("node name \"", self_.name(), "\" is already used by ",
                       QuoteForMessage(holder.address()), " (etcd key ", QuoteForMessage(key), "); give ",
                       self_.address(), " another `node:` in its config"));
    }
    absl::SleepFor(absl::Milliseconds(250));
  }
}

absl::Status EtcdSyncer::PutMember() {
  const int64_t ttl_seconds = std::max<int64_t>(1, absl::ToInt64Seconds(options_.member_ttl));
  ML_ASSIGN_OR_RETURN(lease_id_, etcd_->GrantLease(ttl_seconds));
  return etcd_->Put(members_prefix_ + self_.name(), self_.SerializeAsString(), lease_id_);
}

absl::Status EtcdSyncer::RenewLease() {
  absl::Status renewed = etcd_->KeepAlive(lease_id_);
  if (!absl::IsNotFound(renewed)) return renewed;
  // Expired (etcd unreachable for longer than the TTL, or restarted empty): the member key
  // went with it. Put it again, under a new lease.
  LogWarning(absl::StrCat("registry: ", renewed.message(), "; joining ", etcd_->Describe(), " again"));
  ML_RETURN_IF_ERROR(PutMember());
  LogInfo(absl::StrCat("registry: joined ", etcd_->Describe(), " again as ", self_.name()));
  return absl::OkStatus();
}

void EtcdSyncer::SkipOnce(const std::string& key, int64_t revision, const absl::Status& status) {
  auto [it, inserted] = skipped_.emplace(key, revision);
  if (!inserted && it->second == revision) return;
  it->second = revision;
  LogError(absl::StrCat("registry: skipped ", status.message()));
}

absl::Status EtcdSyncer::SyncMembers() {
  ML_ASSIGN_OR_RETURN(std::vector<mvccpb::KeyValue> kvs,
                      etcd_->GetPrefix(members_prefix_, /*keys_only=*/false));
  std::vector<v1::NodeInfo> members;
  for (const mvccpb::KeyValue& kv : kvs) {
    const std::string origin = absl::StrCat("etcd key ", QuoteForMessage(kv.key()), ": ");
    v1::NodeInfo node;
    if (!node.ParseFromString(kv.value())) {
      SkipOnce(kv.key(), kv.mod_revision(),
               absl::DataLossError(absl::StrCat(origin, "not a serialized NodeInfo")));
      continue;
    }
    absl::Status valid = CheckNodeInfo(node);
    if (valid.ok() && members_prefix_ + node.name() != kv.key()) {
      valid = absl::InvalidArgumentError(absl::StrCat("holds member ", QuoteForMessage(node.name())));
    }
    // A daemon puts its key under its lease, so that the key dies with the daemon; a key
    // without one (put by anyone else) would stay a member forever.
    if (valid.ok() && kv.lease() == 0) {
      valid = absl::InvalidArgumentError("has no lease (a member's key lives under its daemon's lease)");
    }
    if (!valid.ok()) {
      SkipOnce(kv.key(), kv.mod_revision(), absl::DataLossError(absl::StrCat(origin, valid.message())));
      continue;
    }
    members.push_back(std::move(node));
  }
  sink_.members(members);
  return absl::OkStatus();
}

absl::Status EtcdSyncer::SyncModels() {
  // What the sink held before the listing: a model it holds that the listing lacks was
  // removed. (One registered here meanwhile is not in this snapshot, so it is not dropped.)
  const std::vector<std::string> held = sink_.model_names();
  ML_ASSIGN_OR_RETURN(auto revisions, store_->Revisions());
  for (const std::string& name : held) {
    if (revisions.count(name) == 0) sink_.drop_model(name);
  }
  for (auto it = applied_.begin(); it != applied_.end();) {
    it = revisions.count(it->first) == 0 ? applied_.erase(it) : std::next(it);
  }
  for (const auto& [name, revision] : revisions) {
    if (Stopping()) break;  // shutting down: the rest is not needed
    auto applied = applied_.find(name);
    if (applied != applied_.end() && applied->second == revision) continue;
    const std::string key = store_->KeyOf(name);
    absl::StatusOr<std::optional<StoredRecord>> stored = store_->Get(name);
    if (!stored.ok() && !absl::IsDataLoss(stored.status())) return stored.status();
    applied_[name] = revision;
    if (!stored.ok()) {
      SkipOnce(key, revision, stored.status());
      continue;
    }
    if (!stored->has_value()) continue;  // removed since the listing
    if (absl::Status used = sink_.apply_model(**stored); !used.ok()) {
      SkipOnce(key, revision, Annotate(used, absl::StrCat("etcd key ", QuoteForMessage(key))));
    }
  }
  return absl::OkStatus();
}

absl::Status EtcdSyncer::SyncOnce() {
  absl::Status members = SyncMembers();
  absl::Status models = SyncModels();
  return members.ok() ? models : members;
}

void EtcdSyncer::Start() {
  renewal_thread_ = std::thread([this] { RunRenewals(); });
  sync_thread_ = std::thread([this] { RunSyncs(); });
}

void EtcdSyncer::ReportOnce(const absl::Status& status, std::string& last_error) {
  if (!status.ok() && std::string(status.message()) != last_error) {
    LogWarning(absl::StrCat("registry: ", status.message(), " (retrying)"));
    last_error = std::string(status.message());
  } else if (status.ok() && !last_error.empty()) {
    LogInfo(absl::StrCat("registry: ", etcd_->Describe(), " answers again"));
    last_error.clear();
  }
}

void EtcdSyncer::RunRenewals() {
  const absl::Duration renew_every = std::max(options_.member_ttl / 3, absl::Milliseconds(300));
  std::string last_error;
  while (!WaitOrStop(renew_every)) {
    absl::Status renewed = RenewLease();
    ReportOnce(renewed, last_error);
    // Failed: try again soon, while the lease may still be alive.
    while (!renewed.ok() && !WaitOrStop(std::min(renew_every, absl::Milliseconds(500)))) {
      renewed = RenewLease();
      ReportOnce(renewed, last_error);
    }
  }
}

void EtcdSyncer::RunSyncs() {
  std::string last_error;
  do {
    ReportOnce(SyncOnce(), last_error);
  } while (!WaitOrStop(options_.sync_interval));
}

absl::Status EtcdSyncer::Leave() {
  // The lease first: the other peers drop this one at once, even while a sync pass finishes
  // the record it is applying.
  StopRenewals();
  absl::Status revoked = lease_id_ == 0 ? absl::OkStatus() : etcd_->RevokeLease(lease_id_);
  Stop();
  return revoked;
}

}  // namespace metaload
