// The coordinator's state: cluster membership and registered models, and the plans made
// from them. Pure data plus the planner; no I/O of its own: registrations are persisted
// through a RecordStore (daemon/registry/record_store.h) when one is attached.
//
// Members re-join every few seconds (daemon/main.cc); one not heard from for
// `member_timeout` has expired and is left out of new plans. Plans are computed once per
// (model, options, world size, live members) and kept in a small cache, so that the ranks of
// one job, asking one by one, are served from the same plan (PlanFor); each rank gets only its
// own part (ResponseFor).
//
// Thread-safety: all methods may be called concurrently. Planning happens outside the state's
// mutex, once per key: concurrent callers for the same key wait for the one computation.
#ifndef METALOAD_DAEMON_CLUSTER_CLUSTER_STATE_H_
#define METALOAD_DAEMON_CLUSTER_CLUSTER_STATE_H_

#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/registry/record_store.h"
#include "daemon/requests/request_limits.h"
#include "daemon/serving/served_ranges.h"
#include "planner/format/checkpoint.h"
#include "planner/skeleton/skeleton.h"
#include "planner/strategy/strategy.h"
#include "proto/metaload.pb.h"

namespace metaload {

// A registered model as the coordinator holds it: the record and what was parsed from it once.
struct RegisteredModel {
  v1::ModelRecord record;
  Skeleton skeleton;
  Checkpoint checkpoint;
  ServedRanges served;   // what a daemon may stream of it: its tensors' bytes
  uint64_t version = 0;  // changes whenever the name is registered anew
};

// One computed plan and everything needed to answer any rank from it.
struct PlannedModel {
  std::shared_ptr<const RegisteredModel> model;
  StrategyOptions options;
  CompactPlan plan;                   // memory-lean: ranks are answered from it one by one
  std::string digest;                 // PlanDigest(plan, options)
  std::vector<v1::NodeInfo> members;  // the live members it was planned on
  // Computed once with the plan, so that answering one rank costs only that rank's items:
  std::vector<std::string> item_bytes;         // each whole item, serialized as sent
  std::vector<int> item_file;                  // index into `files`, -1 for none
  std::vector<int> item_tied_group;            // index into the skeleton's tied groups, -1 for none
  std::vector<v1::FileSource> files;           // every file with every server, by node name
  std::vector<std::string> file_bytes;         // each file serialized without its servers
  std::vector<std::vector<int>> file_servers;  // each file's servers, as indexes into `members`
  std::vector<std::string> member_bytes;       // each member serialized as an Endpoint
};

// A member as the coordinator last knew it, for `metactl status`.
struct MemberStatus {
  enum State { kUp, kDown, kLeft };
  v1::NodeInfo info;
  State state = kUp;
  absl::Duration since_seen;  // since it last joined; zero for the coordinator itself
};

class ClusterState {
 public:
  struct Options {
    absl::Duration member_timeout = absl::Seconds(10);
    // Servers listed per file in one rank's response: its own node's daemon first, then the
    // others least loaded first, ties spread over the ranks. Bounds what a rank receives
    // however large the cluster, yet lists every server of a file a handful serve, so that a
    // rank can fail over to each (client/source_order.h).
    int servers_per_file = 8;
    int cached_plans = 8;
    // What PutModel accepts (node config keys of the same names); at most the hard caps
    // kMaxModels and kMaxModelTensors (request_limits.h), which also bound RestoreModel.
    int max_models = kMaxModels;
    int64_t max_tensors_per_model = kMaxModelTensors;
  };

  explicit ClusterState(
      Options options, std::function<absl::Time()> clock = [] { return absl::Now(); });

  // The coordinator itself: a member that never expires.
  void SetSelf(const v1::NodeInfo& node);
  // Adds or refreshes a member (by name); true when it is new or had expired. REQUIRES:
  // CheckNodeInfo(node) passed. InvalidArgument if a live member already uses the name with
  // another address (two hosts configured with the same `node`), or it is the coordinator's;
  // ResourceExhausted past kMaxMembers live members.
  // `read_streams`: the ReadRange streams it serves now (JoinRequest.read_streams), its load.
  // `identity`: who sent the Join (security/server_security.h CallerIdentity). A live member's
  // entry is changed only by the identity that made it: PermissionDenied naming both otherwise
  // (under mutual TLS each daemon has its own certificate, so no other may take its name).
  absl::StatusOr<bool> Join(const v1::NodeInfo& node, uint32_t read_streams = 0,
                            const std::string& identity = "");
  // The coordinator's own load, asked whenever a rank's servers are ordered. Call before serving.
  void SetSelfLoad(std::function<uint32_t()> read_streams);
  std::vector<v1::NodeInfo> Members() const;  // live members, sorted by name
  // Every member known, up or not, sorted by name: one that expired or left is remembered
  // (as down or left) until it joins again or its place is needed for a new member.
  std::vector<MemberStatus> MemberStates() const;
  // A member that is stopping leaves every new plan at once instead of after member_timeout.
  // NotFound if it is not a member; InvalidArgument if the name is a member at another
  // address (only the daemon that joined under a name may take it out).
  // PermissionDenied when `identity` is not the one that joined.
  absl::Status Leave(const v1::NodeInfo& node, const std::string& identity = "");
  // Peers sharing a registry (etcd): the other members are exactly `members`, as the registry
  // lists them now: each is refreshed, every member not listed is down at once (its lease
  // expired, or it left) and shown so by MemberStates. REQUIRES: CheckNodeInfo passed for
  // each. A listed name that is this daemon's own (SetSelf) is skipped.
  void SyncMembers(const std::vector<v1::NodeInfo>& members);

  // From now on, every registration and removal is written to `store` before it takes effect
  // in memory; a failed write fails the call and changes nothing. `store` must outlive this;
  // call before the models can change (the coordinator attaches it once its models are restored).
  void AttachStore(RecordStore* store);

  // Adds a model. REQUIRES: CheckModelRecord(record) passed. AlreadyExists when the name is
  // registered with another checkpoint, skeleton or policy, unless `replace`; the same
  // record again is accepted (and not written again). InvalidArgument for a skeleton or layout
  // that does not parse; ResourceExhausted, naming the node config key, past max_models or
  // max_tensors_per_model; the store's error, with context, when it cannot be persisted.
  absl::Status PutModel(const v1::ModelRecord& record, bool replace);
  // PutModel for a record read back from the store at start: not written again, and a name
  // already held is AlreadyExists.
  absl::Status RestoreModel(const v1::ModelRecord& record);
  // Peers: a record another daemon wrote to the shared registry, applied to memory only,
  // replacing what this daemon holds under the name. REQUIRES: CheckModelRecord(record) passed.
  // The same record again changes nothing (cached plans stay valid).
  absl::Status ApplyModel(const v1::ModelRecord& record);
  // Peers: forgets `name`, which another daemon removed from the shared registry (memory only);
  // false when it was not held.
  bool DropModel(const std::string& name);
  // NotFound naming the registered models when there is no such model; the store's error
  // when the removal cannot be persisted.
  absl::Status RemoveModel(const std::string& name);
  std::vector<v1::ModelRecord> Models() const;  // sorted by name
  // The bytes a daemon may serve of `model` (ReadRange). NotFound naming the registered models.
  absl::StatusOr<std::shared_ptr<const ServedRanges>> ServedRangesOf(const std::string& model) const;

  // The plan of `model` for `world_size` ranks (0: every GPU slot of the live members, at
  // most kMaxWorldSize) on the live members. NotFound for an unknown model; InvalidArgument
  // for a world larger than the cluster; the planner's errors otherwise.
  absl::StatusOr<std::shared_ptr<const PlannedModel>> PlanFor(const std::string& model, int world_size,
                                                              const StrategyOptions& options);

  // What GetPlan returns: with `rank`, only that rank's part, the files its items read (each
  // with at most servers_per_file servers) and the tied groups it holds; without, the whole
  // plan, every file with every server, and the skeleton. InvalidArgument for a rank outside
  // the plan.
  absl::StatusOr<v1::GetPlanResponse> ResponseFor(const PlannedModel& planned, std::optional<int> rank) const;
  // ResponseFor(planned, rank), serialized, written from pieces serialized once per plan
  // (proto/plan_wire.h): what GetPlan sends a rank.
  absl::StatusOr<std::string> RankResponseBytes(const PlannedModel& planned, int rank) const;

  // Where every tensor of `model` is stored and which live members serve each file, least
  // loaded first, ties by name (GetLayout). NotFound for an unknown model.
  absl::StatusOr<v1::GetLayoutResponse> LayoutFor(const std::string& model) const;

 private:
  struct Member {
    v1::NodeInfo info;
    absl::Time last_seen;
    bool permanent = false;
    bool left = false;          // it said it stopped; a Join brings it back
    bool dropped = false;       // the shared registry no longer lists it (SyncMembers)
    uint32_t read_streams = 0;  // its load, as of its last Join
    std::string identity;       // who joined under the name (CallerIdentity)
  };
  struct Flight;  // one plan computation, shared by the callers that wait for it

  bool Live(const Member& member, absl::Time now) const;
  // Each of `members`' load now, in its order (0 for one that has left).
  std::vector<uint32_t> LoadsOf(const std::vector<v1::NodeInfo>& members) const;
  std::vector<v1::NodeInfo> LiveMembersLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The registered model `name`, or NotFound listing the names that are registered.
  absl::StatusOr<std::shared_ptr<const RegisteredModel>> FindModelLocked(const std::string& name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AddModel(const v1::ModelRecord& record, bool replace, bool persist);
  absl::StatusOr<std::shared_ptr<const PlannedModel>> Compute(std::shared_ptr<const RegisteredModel> model,
                                                              std::vector<v1::NodeInfo> members,
                                                              int world_size,
                                                              const StrategyOptions& options) const;

  const Options options_;
  const std::function<absl::Time()> clock_;
  std::function<uint32_t()> self_load_;  // set before serving, then only read
  // One change of the registry at a time, held across check, persist and apply, so that what
  // was checked is still true when it is applied; mu_ is not held during the (slow) write,
  // so plans are answered meanwhile. Taken before mu_.
  absl::Mutex registry_mu_;
  RecordStore* store_ ABSL_GUARDED_BY(registry_mu_) = nullptr;
  mutable absl::Mutex mu_ ABSL_ACQUIRED_AFTER(registry_mu_);
  std::map<std::string, Member> members_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<const RegisteredModel>> models_ ABSL_GUARDED_BY(mu_);
  uint64_t next_version_ ABSL_GUARDED_BY(mu_) = 1;
  // Most recently used first.
  std::list<std::pair<std::string, std::shared_ptr<Flight>>> plans_ ABSL_GUARDED_BY(mu_);
};

// Every file of `model` with the members whose roots hold it, sorted by node name.
std::vector<v1::FileSource> FileSources(const RegisteredModel& model,
                                        const std::vector<v1::NodeInfo>& members);

// SHA-256 (hex) of everything that makes two plans the same for the ranks executing them.
// (Fed from the compact form item by item, as the expanded plan would read.)
std::string PlanDigest(const CompactPlan& plan, const StrategyOptions& options);

}  // namespace metaload

#endif  // METALOAD_DAEMON_CLUSTER_CLUSTER_STATE_H_
