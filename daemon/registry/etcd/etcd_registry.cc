#include "daemon/registry/etcd/etcd_registry.h"

#include <algorithm>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "security/token.h"
#include "util/log.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// A member is gone from the other peers' plans at most TTL after its last renewal, plus up to
// 0.5 s until etcd notices the expiry and 0.5 s until they read the members: a TTL one second
// under member_timeout keeps that within member_timeout. etcd grants no lease under ~2 s.
absl::Duration LeaseTtl(absl::Duration member_timeout) {
  return std::max(absl::Seconds(2), absl::Trunc(member_timeout, absl::Seconds(1)) - absl::Seconds(1));
}

// etcd's answers carry one record, one member, or a page of keys (EtcdClient::ListKeys halves a
// page until it fits): a megabyte more than the largest record leaves room for those.
int ReceiveLimitBytes(uint64_t max_record_bytes) {
  return static_cast<int>(std::min<uint64_t>(max_record_bytes + (1 << 20), std::numeric_limits<int>::max()));
}

// Whether Open tries again after `status`: an etcd too slow to answer in time, not listening
// yet, or answering "unavailable" itself (no leader for a moment). Not one that took the
// connection and dropped it during the handshake (TLS to a plaintext etcd, a certificate it
// does not admit: gRPC says "Socket closed", "Endpoint read failed", "Handshake failed" after
// "failed to connect to all addresses"): its configuration is to fix, and waiting only delays
// saying so.
bool WorthRetrying(const absl::Status& status) {
  if (absl::IsDeadlineExceeded(status)) return true;
  if (!absl::IsUnavailable(status)) return false;
  const absl::string_view message = status.message();
  return !absl::StrContains(message, "failed to connect to all addresses") ||
         absl::StrContains(message, "Connection refused");
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdRegistry>> EtcdRegistry::Create(const NodeConfig& config,
                                                                   const v1::NodeInfo& self) {
  ClientCredentials credentials;
  if (!config.registry_tls_ca.empty()) {
    CredentialFiles files{config.registry_tls_ca, config.registry_tls_cert, config.registry_tls_key, ""};
    files.ca_from = "registry_tls.ca";
    files.cert_from = "registry_tls.cert";
    files.key_from = "registry_tls.key";
    ML_ASSIGN_OR_RETURN(credentials, LoadClientCredentials(files));
  }
  EtcdClient::Login login;
  if (!config.registry_auth_user.empty()) {
    login.user = config.registry_auth_user;
    ML_ASSIGN_OR_RETURN(login.password,
                        ReadTokenFile(config.registry_auth_password_file, "registry_auth.password_file"));
  }
  return std::make_unique<EtcdRegistry>(config, self, credentials, std::move(login));
}

EtcdRegistry::EtcdRegistry(const NodeConfig& config, const v1::NodeInfo& self,
                           const ClientCredentials& credentials, EtcdClient::Login login)
    : prefix_(config.registry_prefix),
      etcd_(config.registry_endpoints, absl::Seconds(3), ReceiveLimitBytes(config.registry_max_record_bytes),
            credentials, std::move(login)),
      store_(&etcd_, config.registry_prefix, config.registry_max_record_bytes),
      self_(self),
      member_ttl_(LeaseTtl(config.member_timeout)) {}

absl::Status EtcdRegistry::Open(EtcdSyncer::Sink sink) {
  const absl::Time start = absl::Now();
  auto model_names = sink.model_names;
  syncer_ = std::make_unique<EtcdSyncer>(&etcd_, &store_, self_, EtcdSyncer::Options{prefix_, member_ttl_},
                                         std::move(sink));
  const std::string where = absl::StrCat(etcd_.Describe(), " (prefix ", prefix_, ")");
  // An etcd that is slow for a moment (a leader election, a disk busy with fsync) or not up yet
  // (started beside this daemon) is no reason to exit: every step is tried again for a while.
  // Refusals (a taken name, a login etcd does not know) are final at once.
  const absl::Time give_up = start + kJoinRetryWindow;
  for (int attempt = 1;; ++attempt) {
    absl::Status opened = JoinAndRead(where);
    if (opened.ok()) break;
    if (!WorthRetrying(opened) || absl::Now() + kJoinRetryPause >= give_up) {
      return attempt == 1
                 ? opened
                 : Annotate(opened, absl::StrCat(attempt, " tries over ",
                                                 absl::FormatDuration(absl::Trunc(absl::Now() - start,
                                                                                  absl::Milliseconds(100)))));
    }
    LogWarning(absl::StrCat("registry: ", opened.message(), "; trying again (try ", attempt + 1, ")"));
    absl::SleepFor(kJoinRetryPause);
  }
  LogInfo(absl::StrCat("registry: joined ", where, " as ", self_.name(), "; ", model_names().size(),
                       " models read in ", absl::ToInt64Milliseconds(absl::Now() - start), " ms"));
  syncer_->Start();
  return absl::OkStatus();
}

absl::Status EtcdRegistry::JoinAndRead(const std::string& where) {
  if (absl::Status joined = syncer_->Join(); !joined.ok()) {
    return Annotate(joined, absl::StrCat("joining the registry ", where));
  }
  if (absl::Status synced = syncer_->SyncOnce(); !synced.ok()) {
    (void)syncer_->Leave();  // not serving: take the member key back out
    return absl::Status(synced.code(), absl::StrCat("reading the registry ", where, ": ", synced.message()));
  }
  return absl::OkStatus();
}

absl::Status EtcdRegistry::Leave() { return syncer_ == nullptr ? absl::OkStatus() : syncer_->Leave(); }

void EtcdRegistry::StopSyncing() {
  if (syncer_ != nullptr) syncer_->Stop();
}

}  // namespace metaload
