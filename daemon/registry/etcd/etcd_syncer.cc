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
  if (members_thread_.joinable()) members_thread_.join();
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

void EtcdSyncer::Skip(const std::string& key, const std::string& why) {
  LogError(absl::StrCat("registry: skipped etcd key ", QuoteForMessage(key), ": ", why));
}

absl::StatusOr<std::optional<v1::NodeInfo>> EtcdSyncer::ReadMember(const mvccpb::KeyValue& listed) {
  // A daemon puts its key under its lease, so that the key dies with the daemon; a key
  // without one (put by anyone else) would stay a member forever. Known from the listing:
  // such a key is never fetched.
  if (listed.lease() == 0) {
    Skip(listed.key(), "has no lease (a member's key lives under its daemon's lease)");
    return std::nullopt;
  }
  const std::string name = listed.key().substr(members_prefix_.size());
  if (!CheckName("node name", name).ok()) {
    Skip(listed.key(), absl::StrCat("not ", members_prefix_, "<node name>"));
    return std::nullopt;
  }
  absl::StatusOr<std::optional<mvccpb::KeyValue>> kv = etcd_->Get(listed.key());
  if (absl::IsResourceExhausted(kv.status())) {
    Skip(listed.key(),
         absl::StrCat("a value too large to receive, refused unread (", kv.status().message(), ")"));
    return std::nullopt;
  }
  ML_RETURN_IF_ERROR(kv.status());
  if (!kv->has_value()) return std::nullopt;  // gone since the listing
  const std::string& value = (*kv)->value();
  if (value.size() > kMaxMemberValueBytes) {
    Skip(listed.key(), absl::StrCat("a value of ", value.size(), " bytes, above the ", kMaxMemberValueBytes,
                                    " a member's NodeInfo takes at most: refused unparsed"));
    return std::nullopt;
  }
  v1::NodeInfo node;
  if (!node.ParseFromString(value)) {
    Skip(listed.key(), "not a serialized NodeInfo");
    return std::nullopt;
  }
  absl::Status valid = CheckNodeInfo(node);
  if (valid.ok() && node.name() != name) {
    valid = absl::InvalidArgumentError(absl::StrCat("holds member ", QuoteForMessage(node.name())));
  }
  if (valid.ok() && (*kv)->lease() == 0) {
    valid = absl::InvalidArgumentError("has no lease (a member's key lives under its daemon's lease)");
  }
  if (!valid.ok()) {
    Skip(listed.key(), std::string(valid.message()));
    return std::nullopt;
  }
  return node;
}

absl::Status EtcdSyncer::SyncMembers() {
  ML_ASSIGN_OR_RETURN(std::vector<mvccpb::KeyValue> listed, etcd_->ListKeys(members_prefix_));
  // Only keys written since the last pass are fetched (and a skipped one logged): a junk key
  // costs one Get per write, never one per pass.
  std::map<std::string, Member> seen;
  std::vector<v1::NodeInfo> members;
  for (const mvccpb::KeyValue& kv : listed) {
    auto cached = members_.find(kv.key());
    Member member;
    if (cached != members_.end() && cached->second.mod_revision == kv.mod_revision()) {
      member = std::move(cached->second);
    } else {
      ML_ASSIGN_OR_RETURN(member.node, ReadMember(kv));
      member.mod_revision = kv.mod_revision();
    }
    if (member.node.has_value()) members.push_back(*member.node);
    seen.emplace(kv.key(), std::move(member));
  }
  members_ = std::move(seen);
  sink_.members(members);
  return absl::OkStatus();
}

absl::Status EtcdSyncer::SyncModels() {
  // What the sink held before the listing: a model it holds that the listing lacks was
  // removed. (One registered here meanwhile is not in this snapshot, so it is not dropped.)
  const std::vector<std::string> held = sink_.model_names();
  ML_ASSIGN_OR_RETURN(EtcdRecordStore::Listing listing, store_->List());
  std::map<std::string, int64_t> strays;
  for (const mvccpb::KeyValue& kv : listing.strays) {
    auto logged = strays_.find(kv.key());
    if (logged == strays_.end() || logged->second != kv.mod_revision()) {
      Skip(kv.key(), EtcdRecordStore::kNotOfTheLayout);
    }
    strays.emplace(kv.key(), kv.mod_revision());
  }
  strays_ = std::move(strays);
  for (const std::string& name : held) {
    if (listing.names.count(name) == 0) sink_.drop_model(name);
  }
  for (auto it = applied_.begin(); it != applied_.end();) {
    it = listing.names.count(it->first) == 0 ? applied_.erase(it) : std::next(it);
  }
  for (const auto& [name, claim] : listing.names) {
    if (Stopping()) break;  // shutting down: the rest is not needed
    // A revision is etcd's, once: another key holding the name has another one.
    auto applied = applied_.find(name);
    if (applied != applied_.end() && applied->second == claim.mod_revision) continue;
    absl::StatusOr<std::optional<StoredRecord>> stored = store_->Read(claim);
    if (!stored.ok() && !absl::IsDataLoss(stored.status())) return stored.status();
    applied_[name] = claim.mod_revision;  // logged once per write
    if (!stored.ok()) {
      LogError(absl::StrCat("registry: skipped ", stored.status().message()));
      continue;
    }
    if (!stored->has_value()) continue;  // removed since the listing
    if (absl::Status used = sink_.apply_model(**stored); !used.ok()) {
      Skip(claim.key, std::string(used.message()));
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
  members_thread_ = std::thread([this] { RunSyncs([this] { return SyncMembers(); }); });
  sync_thread_ = std::thread([this] { RunSyncs([this] { return SyncModels(); }); });
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

void EtcdSyncer::RunSyncs(const std::function<absl::Status()>& pass) {
  std::string last_error;
  do {
    ReportOnce(pass(), last_error);
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
