#include "daemon/membership/membership.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "daemon/requests/request_limits.h"
#include "util/error_kind.h"

namespace metaload {

Membership::Membership(Options options, std::function<absl::Time()> clock)
    : options_(options), clock_(std::move(clock)) {}

bool Membership::Live(const Member& member, absl::Time now) const {
  return member.permanent || (!member.left && !member.dropped && !member.restored &&
                              now - member.last_seen <= options_.member_timeout);
}

void Membership::ForgetDownLocked(absl::Time now) {
  for (auto m = members_.begin(); m != members_.end();) {
    m = Live(m->second, now) ? std::next(m) : members_.erase(m);
  }
}

void Membership::SetSelf(const NodeSpec& node) {
  absl::MutexLock lock(&mu_);
  Member self{node, clock_()};
  self.permanent = true;
  members_[node.name] = std::move(self);
}

void Membership::SetSelfLoad(std::function<uint32_t()> read_streams) { self_load_ = std::move(read_streams); }

absl::StatusOr<bool> Membership::Join(const NodeSpec& node, uint32_t read_streams,
                                      const std::string& identity, bool* bound) {
  const absl::Time now = clock_();
  absl::MutexLock lock(&mu_);
  auto it = members_.find(node.name);
  // The name stays its first identity's while the entry is remembered, live or not: a member
  // killed with -9 expires, and a stranger must not take its place (issue 23). An admin
  // releases a name (Release).
  if (it != members_.end() && !it->second.permanent && it->second.identity != identity) {
    return absl::PermissionDeniedError(absl::StrCat(
        "node \"", node.name, "\" joined as ", it->second.identity, "; a Join as ", identity,
        " may not take it", Live(it->second, now) ? "" : " (it is down, not released)",
        ": only the member itself may, or an admin releases the name (metactl release ", node.name, ")"));
  }
  if (it != members_.end() && Live(it->second, now) && it->second.node.address != node.address) {
    return absl::InvalidArgumentError(absl::StrCat("node name \"", node.name, "\" is already used by ",
                                                   it->second.node.address, "; give ", node.address,
                                                   " another `node:` in its config"));
  }
  if (it != members_.end() && it->second.permanent) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node name \"", node.name, "\" is the coordinator's own; give the joining node another"));
  }
  const bool is_new = it == members_.end() || !Live(it->second, now);
  if (it == members_.end() && members_.size() >= static_cast<size_t>(kMaxMembers)) {
    // Members that are down are remembered (status shows them) until they make room.
    ForgetDownLocked(now);
    if (members_.size() >= static_cast<size_t>(kMaxMembers)) {
      return WithErrorKind(
          absl::ResourceExhaustedError(
              absl::StrCat("the cluster has ", members_.size(), " members, the most one coordinator takes")),
          ErrorKind::kFailure);
    }
  }
  if (bound != nullptr) *bound = it == members_.end();
  Member member{node, now};
  member.read_streams = read_streams;
  member.identity = identity;
  members_[node.name] = std::move(member);
  return is_new;
}

absl::Status Membership::Release(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = members_.find(name);
  if (it == members_.end() || it->second.permanent) {
    return absl::NotFoundError(absl::StrCat("node \"", name, "\" is not a member"));
  }
  members_.erase(it);
  return absl::OkStatus();
}

void Membership::RestoreBinding(const std::string& name, const std::string& identity) {
  absl::MutexLock lock(&mu_);
  if (members_.count(name) != 0) return;
  Member member{NodeSpec{name}, clock_()};
  member.restored = true;
  member.identity = identity;
  members_[name] = std::move(member);
}

std::optional<std::string> Membership::BoundIdentity(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = members_.find(name);
  if (it == members_.end() || it->second.permanent) return std::nullopt;
  return it->second.identity;
}

std::optional<BoundMember> Membership::Bound(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = members_.find(name);
  if (it == members_.end() || it->second.permanent) return std::nullopt;
  return BoundMember{it->second.identity, it->second.node};
}

absl::Status Membership::Leave(const NodeSpec& node, const std::string& identity) {
  absl::MutexLock lock(&mu_);
  auto it = members_.find(node.name);
  if (it == members_.end() || it->second.permanent) {
    return absl::NotFoundError(absl::StrCat("node \"", node.name, "\" is not a member"));
  }
  // Only the daemon that joined under the name may take it out of plans.
  if (it->second.identity != identity) {
    return absl::PermissionDeniedError(absl::StrCat(
        "node \"", node.name, "\" joined as ", it->second.identity, "; ", identity, " may not take it out"));
  }
  if (it->second.node.address != node.address) {
    return absl::InvalidArgumentError(absl::StrCat("node \"", node.name, "\" is a member at ",
                                                   it->second.node.address, ", not at ", node.address));
  }
  it->second.left = true;
  return absl::OkStatus();
}

void Membership::Sync(const std::vector<NodeSpec>& members) {
  const absl::Time now = clock_();
  absl::MutexLock lock(&mu_);
  std::set<std::string> listed;
  for (const NodeSpec& node : members) listed.insert(node.name);
  // A member the registry no longer lists is down at once (its lease expired, or it left),
  // and stays in status as such until its place is needed.
  for (auto& [name, member] : members_) {
    if (!member.permanent && listed.count(name) == 0) member.dropped = true;
  }
  for (const NodeSpec& node : members) {
    auto it = members_.find(node.name);
    if (it != members_.end() && it->second.permanent) continue;  // a permanent name stays as it is
    if (it == members_.end() && members_.size() >= static_cast<size_t>(kMaxMembers)) {
      ForgetDownLocked(now);
      if (members_.size() >= static_cast<size_t>(kMaxMembers)) break;
    }
    members_[node.name] = Member{node, now};
  }
}

std::vector<NodeSpec> Membership::Live() const {
  const absl::Time now = clock_();
  absl::MutexLock lock(&mu_);
  std::vector<NodeSpec> out;
  for (const auto& [name, member] : members_) {
    if (Live(member, now)) out.push_back(member.node);
  }
  return out;
}

std::vector<MemberStatus> Membership::States() const {
  const absl::Time now = clock_();
  absl::MutexLock lock(&mu_);
  std::vector<MemberStatus> out;
  out.reserve(members_.size());
  for (const auto& [name, member] : members_) {
    MemberStatus status{member.node, MemberStatus::kUp,
                        member.permanent ? absl::ZeroDuration() : now - member.last_seen};
    if (!Live(member, now)) status.state = member.left ? MemberStatus::kLeft : MemberStatus::kDown;
    out.push_back(std::move(status));
  }
  return out;
}

std::vector<uint32_t> Membership::LoadsOf(const std::vector<NodeSpec>& members) const {
  std::vector<uint32_t> loads(members.size(), 0);
  absl::MutexLock lock(&mu_);
  for (size_t m = 0; m < members.size(); ++m) {
    auto it = members_.find(members[m].name);
    if (it == members_.end()) continue;
    loads[m] = it->second.permanent && self_load_ ? self_load_() : it->second.read_streams;
  }
  return loads;
}

}  // namespace metaload
