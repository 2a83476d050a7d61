// One daemon's membership in a cluster whose registry is etcd, and its view of everyone else:
// every daemon is a peer that answers plans itself, from the members and models this keeps in
// step with etcd (daemon/service/peer.h).
//
//   <prefix>members/<node>         a serialized NodeInfo under this daemon's lease (TTL =
//                                  member_timeout, renewed every TTL/3): a daemon that dies, or
//                                  loses etcd, leaves the members within member_timeout.
//   <prefix>models/<node>/<name>   EtcdRecordStore's records, each under the key range of the
//                                  node that registered it.
// With per-peer etcd roles (deploy/etcd-peer-roles.sh) each peer may write only these keys of
// its own node, and read the rest.
//
// A thread of its own (never a gRPC thread) renews the lease (re-granting it and putting the
// member key again if it expired); two others, every `sync_interval`, list a prefix each (keys
// only, in pages: EtcdClient::ListKeys) and hand what changed to the Sink: the members as
// listed, models written or removed since the last pass. However long a record takes to apply,
// the lease is renewed and the members are read on time (a 41 MiB record took ~7 s to apply on
// a loaded machine: read on the models' thread, the members went stale meanwhile, past
// member_timeout, and each peer planned alone). Values are fetched key by key, and only those
// written since the last pass: one key too large to receive, or junk, is that key's problem,
// never the listing's. What etcd holds is untrusted: a member key not named members/<node> or
// under no lease (it would never expire), a member value above kMaxMemberValueBytes, too large
// to receive, that does not parse or fails CheckNodeInfo, a model key not of the layout or
// whose value does not decode, is skipped with one error log line naming the key (again only
// when the key is written anew); the Sink validates records before using them.
//
// Thread-safety: Sink callbacks run on this object's threads (Start: `members` on one, the
// others on another, concurrently) or the caller's (SyncOnce).
#ifndef METALOAD_DAEMON_REGISTRY_ETCD_ETCD_SYNCER_H_
#define METALOAD_DAEMON_REGISTRY_ETCD_ETCD_SYNCER_H_

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/registry/etcd/etcd_client.h"
#include "daemon/registry/etcd/etcd_record_store.h"
#include "daemon/requests/request_limits.h"
#include "proto/metaload.pb.h"

namespace metaload {

class EtcdSyncer {
 public:
  // The largest member value read: the largest NodeInfo CheckNodeInfo accepts is its roots
  // (kMaxRootsTotalBytes together, 64 KiB, and 64 of them, ~3 bytes of framing each), a name of
  // 128 bytes, an address of at most ~260 and three numbers; 16 KiB above the roots leaves room
  // for fields a newer daemon adds. A larger value is junk, refused before it is parsed.
  static constexpr size_t kMaxMemberValueBytes = kMaxRootsTotalBytes + (16 << 10);
  struct Options {
    std::string prefix = "/metaload/";
    absl::Duration member_ttl = absl::Seconds(10);  // whole seconds; etcd's minimum is ~2 s
    absl::Duration sync_interval = absl::Milliseconds(500);
  };
  struct Sink {
    std::function<void(const std::vector<v1::NodeInfo>&)> members;  // every valid listed member
    std::function<absl::Status(const StoredRecord&)> apply_model;   // written since last pass
    std::function<void(const std::string&)> drop_model;             // held but gone from etcd
    std::function<std::vector<std::string>()> model_names;          // what the sink holds
  };

  // `etcd` and `store` must outlive this.
  EtcdSyncer(EtcdClient* etcd, EtcdRecordStore* store, v1::NodeInfo self, Options options, Sink sink);
  ~EtcdSyncer();  // stops the thread; the lease is left to expire unless Leave ran

  // Grants the lease and puts this member's key. Unavailable when etcd cannot be reached;
  // FailedPrecondition when another daemon (another address) holds this node name beyond
  // one TTL (two hosts configured with the same `node:`). Blocks up to TTL + 1 s.
  absl::Status Join();
  // One pass of reading etcd into the sink (Start's two threads run its halves every sync_interval);
  // the error of the first read that failed, after doing what it could.
  absl::Status SyncOnce();
  // Starts the threads that renew the lease and sync.
  void Start();
  // Stops the threads and revokes the lease: the other peers drop this member at their next
  // pass instead of member_timeout later.
  absl::Status Leave();
  // Stops the threads (when they run); the lease is left to expire. A sync pass stops between
  // two records.
  void Stop();

 private:
  // Sets stop_ and joins the renewal thread (after it, only this thread touches lease_id_).
  void StopRenewals();
  void RunRenewals();
  // Runs `pass` every sync_interval until Stop, logging a failure once until it changes.
  void RunSyncs(const std::function<absl::Status()>& pass);
  // Sleeps `how_long` or until Stop; whether Stop was called.
  bool WaitOrStop(absl::Duration how_long);
  bool Stopping();
  // Logs a failure once until it changes, and the recovery; `last_error` is the caller's thread's.
  void ReportOnce(const absl::Status& status, std::string& last_error);
  absl::Status WaitUntilNameIsFree();
  absl::Status PutMember();  // under a new lease
  absl::Status RenewLease();
  absl::Status SyncMembers();
  absl::Status SyncModels();
  // The member `listed` (keys only) names, fetched: nullopt when it is not one (logged).
  absl::StatusOr<std::optional<v1::NodeInfo>> ReadMember(const mvccpb::KeyValue& listed);
  // Logs that `key` is not used, and why.
  void Skip(const std::string& key, const std::string& why);

  EtcdClient* const etcd_;
  EtcdRecordStore* const store_;
  const v1::NodeInfo self_;
  const Options options_;
  const Sink sink_;
  const std::string members_prefix_;
  int64_t lease_id_ = 0;  // only Join, the renewal thread and Leave (after Stop) touch it
  // Only SyncModels touches applied_ and strays_, only SyncMembers members_ (each on its thread,
  // or Open's before they start).
  std::map<std::string, int64_t> applied_;  // model name -> revision handed to the sink
  struct Member {
    int64_t mod_revision = 0;
    std::optional<v1::NodeInfo> node;  // nullopt: skipped (logged)
  };
  std::map<std::string, Member> members_;  // member key -> what its last write held
  std::map<std::string, int64_t> strays_;  // model key not of the layout -> revision logged
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread renewal_thread_;
  std::thread members_thread_;  // SyncMembers
  std::thread sync_thread_;     // SyncModels
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_REGISTRY_ETCD_ETCD_SYNCER_H_
