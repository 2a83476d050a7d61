// Who is in the cluster, as a coordinator (or an etcd peer) knows it: members that expire.
// Node agents re-join every few seconds (membership/joiner.h); one not heard from for
// `member_timeout` is down and left out of new plans; one that said it is stopping has left.
// Peers sharing an etcd registry are told the members instead (Sync). Each member is a
// NodeSpec (planner/plan/cluster.h): its name, address, GPUs and roots; this daemon's own entry
// (SetSelf) never expires.
//
//   Membership members(Membership::Options{absl::Seconds(10)});
//   members.SetSelf(self);
//   ML_ASSIGN_OR_RETURN(bool is_new, members.Join(node, read_streams, identity));
//   std::vector<NodeSpec> live = members.Live();
//
// Thread-safety: every method may be called concurrently (one internal mutex, never held
// while calling out, except the self-load function LoadsOf asks).
#ifndef METALOAD_DAEMON_MEMBERSHIP_MEMBERSHIP_H_
#define METALOAD_DAEMON_MEMBERSHIP_MEMBERSHIP_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/membership/node_restriction.h"
#include "daemon/requests/request_limits.h"
#include "planner/plan/cluster.h"

namespace metaload {

// A member as the coordinator last knew it, for `metactl status`.
struct MemberStatus {
  enum State { kUp, kDown, kLeft };
  NodeSpec node;
  State state = kUp;
  absl::Duration since_seen;  // since it last joined; zero for this daemon itself
};

// Every member known, up to a bound: what one GetStatus answer lists, whatever the table holds.
struct MemberStates {
  std::vector<MemberStatus> listed;     // the first by name, as many as the bounds allow
  uint32_t up = 0, down = 0, left = 0;  // every member, listed or not
};

class Membership {
 public:
  struct Options {
    absl::Duration member_timeout = absl::Seconds(10);
    // Names one identity may hold, up or down, until an admin releases one; 0: no bound. A
    // hostile member credential holder could otherwise fill the table (issue 35). The shared
    // identities (IsSharedIdentity) are not one holder: only kMaxMembers bounds them.
    int max_names_per_identity = 0;
    // Bytes of roots the members hold together (CheckNodeInfo bounds each member's).
    uint64_t max_roots_bytes = kMaxMemberRootsBytes;
  };

  explicit Membership(
      Options options, std::function<absl::Time()> clock = [] { return absl::Now(); });

  // This daemon itself: a member that never expires.
  void SetSelf(const NodeSpec& node);
  // This daemon's own load, asked whenever a rank's servers are ordered. Call before serving.
  void SetSelfLoad(std::function<uint32_t()> read_streams);

  // Adds or refreshes a member (by name); true when it is new or had expired. REQUIRES:
  // CheckNodeInfo passed for it. InvalidArgument if a live member already uses the name with
  // another address (two hosts configured with the same `node`), or it is this daemon's.
  // ResourceExhausted for a new name past kMaxMembers members, up or down (a name is never
  // forgotten to make room: a stranger would then take a down member's name, issue 35), or past
  // max_names_per_identity names of `identity`; and for roots past max_roots_bytes together.
  // `read_streams`: the ReadRange streams it serves now (JoinRequest.read_streams), its load.
  // `identity`: who sent the Join (security/server_security.h Authenticate). A member's entry,
  // live or down, is changed only by the identity that made it, until Release: PermissionDenied
  // naming both otherwise (under mutual TLS each daemon has its own certificate, so no other may
  // take its name, not even after it was killed).
  // `bound`, when given, is set to whether this Join bound the name to `identity` (no member
  // had it): what a coordinator keeps across restarts (binding_store.h).
  absl::StatusOr<bool> Join(const NodeSpec& node, uint32_t read_streams = 0, const std::string& identity = "",
                            bool* bound = nullptr);
  // A member that is stopping leaves every new plan at once instead of after member_timeout.
  // NotFound if it is not a member; InvalidArgument if the name is a member at another
  // address (only the daemon that joined under a name may take it out).
  // PermissionDenied when `identity` is not the one that joined.
  absl::Status Leave(const NodeSpec& node, const std::string& identity = "");
  // Forgets the member `name` and whose it was (an admin's decision): anyone may join under it
  // again. NotFound if it is not a member.
  absl::Status Release(const std::string& name);
  // A name bound to `identity` before this daemon started (binding_store.h): a member that is
  // down until that identity joins under it, as one that expired. Before serving; a name this
  // daemon already knows is left as it is.
  void RestoreBinding(const std::string& name, const std::string& identity);
  // Whose the name is: the identity of the member that has it; nullopt for none (or this
  // daemon's own).
  std::optional<std::string> BoundIdentity(const std::string& name) const;
  // The same with the node the member announced when it last joined (node_restriction.h).
  std::optional<BoundMember> Bound(const std::string& name) const;
  // Peers sharing a registry (etcd): the other members are exactly `members`, as the registry
  // lists them now: each is refreshed, every member not listed is down at once (its lease
  // expired, or it left) and shown so by States. REQUIRES: CheckNodeInfo passed for each. A
  // listed name that is this daemon's own (SetSelf) is skipped.
  void Sync(const std::vector<NodeSpec>& members);

  std::vector<NodeSpec> Live() const;  // live members, sorted by name
  // Every member known, up or not, sorted by name: one that expired or left is remembered (as
  // down or left) until it joins again or is released (or, from a shared registry, its place is
  // needed). Lists at most `max_listed` members and `max_bytes` of their names, addresses and
  // roots (at least one member); counts all.
  MemberStates States(size_t max_listed, uint64_t max_bytes) const;
  // The members that went down since the last call (not heard from for member_timeout, or no
  // longer listed by the shared registry), each once until it is up again; not those that left
  // (they said so) or are held for a restart's binding. For the log, about once a second.
  std::vector<std::string> NewlyDown();
  // Each of `members`' load now, in its order (0 for one no longer known).
  std::vector<uint32_t> LoadsOf(const std::vector<NodeSpec>& members) const;

 private:
  struct Member {
    NodeSpec node;
    absl::Time last_seen;
    bool permanent = false;
    bool left = false;          // it said it stopped; a Join brings it back
    bool dropped = false;       // the shared registry no longer lists it (Sync)
    bool restored = false;      // bound before a restart (RestoreBinding), not joined since
    uint32_t read_streams = 0;  // its load, as of its last Join
    bool down_logged = false;   // NewlyDown returned it
    std::string identity;       // who joined under the name (Authenticate)
  };

  bool Live(const Member& member, absl::Time now) const;
  // A shared registry's members (Sync): forgets members that are not live, to make room for a
  // new one. Never for a Join: their names are bound to who joined.
  void ForgetDownLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every change of members_ goes through these two, which keep the counts below.
  void PutLocked(const std::string& name, Member member) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::map<std::string, Member>::iterator EraseLocked(std::map<std::string, Member>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every member's roots together once `node` is (again) a member under its name.
  uint64_t RootsBytesWithLocked(const NodeSpec& node) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Why `identity` may not take one more name; OK when it may.
  absl::Status CheckNewNameLocked(const std::string& identity) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const Options options_;
  const std::function<absl::Time()> clock_;
  std::function<uint32_t()> self_load_;  // set before serving, then only read
  mutable absl::Mutex mu_;
  std::map<std::string, Member> members_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> names_of_ ABSL_GUARDED_BY(mu_);  // names each identity holds
  uint64_t roots_bytes_ ABSL_GUARDED_BY(mu_) = 0;             // every member's roots together
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_MEMBERSHIP_MEMBERSHIP_H_
