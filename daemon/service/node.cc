#include "daemon/service/node.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/config/self_address.h"
#include "daemon/registry/embedded_record_store.h"
#include "daemon/service/agent.h"
#include "daemon/service/coordinator.h"
#include "daemon/service/peer.h"
#include "proto/convert.h"
#include "util/log.h"
#include "util/status_macros.h"

namespace metaload {

absl::StatusOr<ServerSecurity> LoadNodeSecurity(const NodeConfig& config) {
  ServerSecurityFiles files{config.tls_cert, config.tls_key, config.tls_client_ca, config.tls_ca,
                            config.auth_token_file};
  files.role_token_files = config.auth_tokens;
  files.source = config.source;
  files.certificate_roles.configured = config.tls_roles_set;
  for (const auto& [role_name, pattern] : config.tls_roles) {
    Role role = Role::kReader;
    ParseRole(role_name, &role);  // the node config checked the names
    files.certificate_roles.patterns.emplace_back(pattern, role);
  }
  files.node_certificate = config.tls_node_certificate;
  return LoadServerSecurity(files);
}
namespace {

// What the registry's syncer hands a peer.
EtcdSyncer::Sink SinkInto(Peer& peer) {
  EtcdSyncer::Sink sink;
  sink.members = [&peer](const std::vector<v1::NodeInfo>& members) {
    std::vector<NodeSpec> nodes;
    nodes.reserve(members.size());
    for (const v1::NodeInfo& node : members) nodes.push_back(NodeSpecFromProto(node));
    peer.SyncMembers(nodes);
  };
  sink.apply_model = [&peer](const StoredRecord& stored) {
    return peer.ApplyShared(stored.record, stored.origin);
  };
  sink.drop_model = [&peer](const std::string& name) { peer.DropShared(name); };
  sink.model_names = [&peer] { return peer.ModelNames(); };
  return sink;
}

}  // namespace

Node::Node(const NodeConfig& config, ServerSecurity security, ServiceSeams seams)
    : config_(config), service_(config, std::move(security), &meta_, seams) {}

Node::~Node() {
  joiner_.reset();
  if (etcd_ != nullptr) etcd_->StopSyncing();  // its thread feeds the service's backend
}

absl::StatusOr<Node::Role> Node::Start(int port, const std::string& hostname) {
  address_ = AdvertisedAddress(config_, port, hostname);
  if (!config_.registry_endpoints.empty()) {
    NodeSpec self = service_.self();
    self.address = address_;
    ML_ASSIGN_OR_RETURN(etcd_, EtcdRegistry::Create(config_, NodeSpecToProto(self)));
    auto peer = std::make_unique<Peer>(service_.BindAddress(address_), etcd_->store(), etcd_->Describe());
    ML_RETURN_IF_ERROR(etcd_->Open(SinkInto(*peer)));
    service_.Start(std::move(peer));
    return Role::kPeer;
  }
  if (CoordinatorIsSelf(config_, address_, port, hostname)) {
    auto coordinator = std::make_unique<Coordinator>(service_.BindAddress(address_));
    if (!config_.state_dir.empty()) {
      ML_ASSIGN_OR_RETURN(std::unique_ptr<EmbeddedRecordStore> store,
                          EmbeddedRecordStore::Open(config_.state_dir));
      ML_RETURN_IF_ERROR(coordinator->Restore(store.get()));
      ML_RETURN_IF_ERROR(coordinator->RestoreBindings(store.get()));
      records_ = std::move(store);
    }
    service_.Start(std::move(coordinator));
    return Role::kCoordinator;
  }
  // Who coordinates is known only now, so the config parser could not refuse it.
  if (!config_.state_dir.empty()) {
    LogWarning(absl::StrCat("state_dir ", config_.state_dir,
                            " is ignored: this node is not the coordinator, and ",
                            "only the coordinator persists the registry"));
  }
  auto agent = std::make_unique<Agent>(service_.BindAddress(address_));
  agent_ = agent.get();
  service_.Start(std::move(agent));
  return Role::kAgent;
}

void Node::StartJoining() {
  if (agent_ == nullptr) return;
  Agent* agent = agent_;
  joiner_ = std::make_unique<Joiner>(
      [agent](absl::Duration timeout, bool leaving) { return agent->JoinCoordinator(timeout, leaving); });
}

bool Node::Serving(std::string* why_not) const {
  const auto no = [why_not](std::string why) {
    if (why_not != nullptr) *why_not = std::move(why);
    return false;
  };
  if (address_.empty()) return no("starting");
  if (agent_ == nullptr) return true;
  const absl::Duration within = std::max(config_.member_timeout, absl::Seconds(6));
  switch (agent_->LastJoin(within)) {
    case Agent::JoinState::kJoined:
      return true;
    case Agent::JoinState::kFailed:
      return no(absl::StrCat("the last join of coordinator ", config_.coordinator, " failed"));
    case Agent::JoinState::kStale:
      break;
  }
  return no(absl::StrCat("no join of coordinator ", config_.coordinator, " succeeded within ",
                         absl::FormatDuration(within)));
}

void Node::Leave() {
  if (joiner_ != nullptr) joiner_->Leave();
  if (etcd_ != nullptr) {
    // Revoking the lease takes this daemon out of the other peers' plans at once.
    absl::Status left = etcd_->Leave();
    if (left.ok()) {
      LogInfo("left the registry: new plans no longer list this node");
    } else {
      LogWarning(absl::StrCat("leaving the registry: ", left.message(), " (the lease will expire)"));
    }
  }
}

}  // namespace metaload
