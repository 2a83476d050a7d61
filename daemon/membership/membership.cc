#include "daemon/membership/membership.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "daemon/requests/request_limits.h"
#include "util/error_kind.h"
#include "util/identifiers.h"
#include "util/status_macros.h"

namespace metaload {

Membership::Membership(Options options, std::function<absl::Time()> clock)
    : options_(options), clock_(std::move(clock)) {}

bool Membership::Live(const Member& member, absl::Time now) const {
  return member.permanent || (!member.left && !member.dropped && !member.restored &&
                              now - member.last_seen <= options_.member_timeout);
}

namespace {

uint64_t RootsBytes(const NodeSpec& node) {
  uint64_t bytes = 0;
  for (const std::string& root : node.roots) bytes += root.size();
  return bytes;
}

// What a member costs a GetStatus answer: its strings and their framing.
uint64_t StatusBytes(const NodeSpec& node) {
  return node.name.size() + node.address.size() + RootsBytes(node) + 8 * node.roots.size() + 64;
}

absl::Status Exhausted(const std::string& message) {
  return WithErrorKind(absl::ResourceExhaustedError(message), ErrorKind::kFailure);
}

}  // namespace

void Membership::ForgetDownLocked(absl::Time now) {
  for (auto m = members_.begin(); m != members_.end();) {
    m = Live(m->second, now) ? std::next(m) : EraseLocked(m);
  }
}

void Membership::PutLocked(const std::string& name, Member member) {
  auto it = members_.find(name);
  if (it != members_.end()) EraseLocked(it);
  if (!member.permanent) ++names_of_[member.identity];
  roots_bytes_ += RootsBytes(member.node);
  members_.emplace(name, std::move(member));
}

std::map<std::string, Membership::Member>::iterator Membership::EraseLocked(
    std::map<std::string, Member>::iterator it) {
  if (!it->second.permanent) {
    auto held = names_of_.find(it->second.identity);
    if (--held->second == 0) names_of_.erase(held);
  }
  roots_bytes_ -= RootsBytes(it->second.node);
  return members_.erase(it);
}

uint64_t Membership::RootsBytesWithLocked(const NodeSpec& node) const {
  // Each term is at most max_roots_bytes (or kMaxRootsTotalBytes): no overflow; the roots the
  // name has now are part of roots_bytes_.
  auto it = members_.find(node.name);
  return roots_bytes_ - (it == members_.end() ? 0 : RootsBytes(it->second.node)) + RootsBytes(node);
}

absl::Status Membership::CheckNewNameLocked(const std::string& identity) const {
  if (members_.size() >= static_cast<size_t>(kMaxMembers)) {
    return Exhausted(
        absl::StrCat("the cluster has ", members_.size(),
                     " members, up or down, the most one coordinator keeps: a member's name "
                     "stays its own while it is down; an admin frees one with `metactl release NAME`"));
  }
  const int cap = options_.max_names_per_identity;
  if (cap <= 0 || IsSharedIdentity(identity)) return absl::OkStatus();
  auto held = names_of_.find(identity);
  if (held != names_of_.end() && held->second >= cap) {
    return Exhausted(absl::StrCat(identity, " already holds ", held->second,
                                  " node names, up or down (max_names_per_identity in the coordinator's "
                                  "config); an admin frees one with `metactl release NAME`"));
  }
  return absl::OkStatus();
}

void Membership::SetSelf(const NodeSpec& node) {
  absl::MutexLock lock(&mu_);
  Member self{node, clock_()};
  self.permanent = true;
  PutLocked(node.name, std::move(self));
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
  // A down member keeps its place and its name: no name is forgotten to make room (issue 35:
  // 4,094 made-up names filled the table, which then forgot b's binding, and a stranger took b).
  if (it == members_.end()) ML_RETURN_IF_ERROR(CheckNewNameLocked(identity));
  if (const uint64_t roots = RootsBytesWithLocked(node); roots > options_.max_roots_bytes) {
    return Exhausted(absl::StrCat("node \"", node.name, "\": its roots (", RootsBytes(node),
                                  " bytes) would bring the members' roots to ", roots,
                                  " bytes, more than the ", options_.max_roots_bytes,
                                  " bytes the coordinator keeps for all members' ",
                                  "roots together (each member's: at most ", kMaxRootsPerNode, " roots, ",
                                  kMaxRootsTotalBytes, " bytes)"));
  }
  if (bound != nullptr) *bound = it == members_.end();
  Member member{node, now};
  member.read_streams = read_streams;
  member.identity = identity;
  PutLocked(node.name, std::move(member));
  return is_new;
}

absl::Status Membership::Release(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = members_.find(name);
  if (it == members_.end() || it->second.permanent) {
    return absl::NotFoundError(absl::StrCat("node \"", name, "\" is not a member"));
  }
  EraseLocked(it);
  return absl::OkStatus();
}

void Membership::RestoreBinding(const std::string& name, const std::string& identity) {
  absl::MutexLock lock(&mu_);
  if (members_.count(name) != 0) return;
  Member member{NodeSpec{name}, clock_()};
  member.restored = true;
  member.identity = identity;
  PutLocked(name, std::move(member));  // each counts, even past a lowered max_names_per_identity
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
    if (RootsBytesWithLocked(node) > options_.max_roots_bytes) continue;  // as a refused Join
    PutLocked(node.name, Member{node, now});
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

MemberStates Membership::States(size_t max_listed, uint64_t max_bytes) const {
  const absl::Time now = clock_();
  absl::MutexLock lock(&mu_);
  MemberStates out;
  uint64_t listed_bytes = 0;
  bool full = false;  // once one is left out, so is every later one: the list is a prefix by name
  for (const auto& [name, member] : members_) {
    MemberStatus::State state = MemberStatus::kUp;
    if (!Live(member, now)) state = member.left ? MemberStatus::kLeft : MemberStatus::kDown;
    ++(state == MemberStatus::kUp ? out.up : state == MemberStatus::kDown ? out.down : out.left);
    const uint64_t bytes = StatusBytes(member.node);
    full =
        full || out.listed.size() >= max_listed || (!out.listed.empty() && listed_bytes + bytes > max_bytes);
    if (full) continue;
    listed_bytes += bytes;
    out.listed.push_back(
        MemberStatus{member.node, state, member.permanent ? absl::ZeroDuration() : now - member.last_seen});
  }
  return out;
}

std::vector<std::string> Membership::NewlyDown() {
  const absl::Time now = clock_();
  absl::MutexLock lock(&mu_);
  std::vector<std::string> down;
  for (auto& [name, member] : members_) {
    if (member.down_logged || member.left || member.restored || Live(member, now)) continue;
    member.down_logged = true;
    down.push_back(name);
  }
  return down;
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
