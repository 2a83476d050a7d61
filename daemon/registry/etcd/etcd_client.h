// A small synchronous client of etcd's v3 gRPC API (proto/etcd/rpc.proto): the calls metad's
// etcd registry needs, with each endpoint tried in turn when one cannot be reached.
//
//   EtcdClient etcd({"10.0.0.5:2379", "10.0.0.6:2379"});
//   ML_RETURN_IF_ERROR(etcd.Put("/metaload/models/llama", bytes));
//   ML_ASSIGN_OR_RETURN(std::optional<mvccpb::KeyValue> kv, etcd.Get("/metaload/models/llama"));
//
// Errors name the endpoint and the key ("etcd 10.0.0.5:2379: Put /metaload/models/llama: ...")
// and keep gRPC's code: UNAVAILABLE (no endpoint answered, try again), DEADLINE_EXCEEDED, or
// what etcd said. Every call blocks up to `call_timeout` per endpoint: never call it on a gRPC
// reaction. Plaintext, or TLS with `credentials` (a CA, and a client certificate for etcd's
// --client-cert-auth); with a `login`, every call carries the token etcd's Authenticate gave
// for it (taken again when etcd says it is no longer valid: its TTL ran out, etcd restarted).
//
// Thread-safety: every method may be called concurrently.
#ifndef METALOAD_DAEMON_REGISTRY_ETCD_ETCD_CLIENT_H_
#define METALOAD_DAEMON_REGISTRY_ETCD_ETCD_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "etcd/rpc.grpc.pb.h"
#include "security/client_credentials.h"

namespace metaload {

class EtcdClient {
 public:
  // `endpoints`: host:port of etcd's client URL, at least one. An answer larger than
  // `max_receive_bytes` fails with RESOURCE_EXHAUSTED as soon as its size is known, unread.
  // An etcd user and its password (etcd's auth); an empty user: none.
  struct Login {
    std::string user, password;
  };
  explicit EtcdClient(std::vector<std::string> endpoints, absl::Duration call_timeout = absl::Seconds(3),
                      int max_receive_bytes = 1 << 30, const ClientCredentials& credentials = {},
                      Login login = {});

  // The key's current value; nullopt when there is no such key.
  absl::StatusOr<std::optional<mvccpb::KeyValue>> Get(const std::string& key);
  // Every key that starts with `prefix`, sorted by key, without values (revisions and leases
  // are there), as of one revision. Read in pages of at most kListPageKeys keys; a page too
  // large to receive (keys of megabytes) is asked again with half as many keys, down to one:
  // however many keys the prefix holds, no answer exceeds the receive limit unless one key
  // alone does. Values are fetched key by key (Get), so that one value too large to receive
  // fails its own Get, never the listing (issue 35: three 1 MiB junk members failed every
  // peer's member range, "Received message larger than max", and each peer planned alone).
  absl::StatusOr<std::vector<mvccpb::KeyValue>> ListKeys(const std::string& prefix);
  static constexpr int64_t kListPageKeys = 1024;
  // `lease_id` 0: the key lives until deleted; else it is deleted when the lease expires.
  absl::Status Put(const std::string& key, const std::string& value, int64_t lease_id = 0);
  // OK when there was no such key.
  absl::Status Delete(const std::string& key);
  // Put and Delete only while the key's last write is still `expected_mod_revision` (0: while
  // there is no such key), in one transaction: Aborted when another writer came first. Put
  // returns the revision it wrote.
  absl::StatusOr<int64_t> PutIfUnchanged(const std::string& key, const std::string& value,
                                         int64_t expected_mod_revision);
  absl::Status DeleteIfUnchanged(const std::string& key, int64_t expected_mod_revision);
  // Deletes `from_key` and puts `key` in one transaction, while `from_key`'s last write is still
  // `expected_mod_revision`; the revision written (Aborted as PutIfUnchanged).
  absl::StatusOr<int64_t> MoveIfUnchanged(const std::string& from_key, int64_t expected_mod_revision,
                                          const std::string& key, const std::string& value);

  // A new lease of `ttl_seconds` (etcd may grant more, never less); its ID.
  absl::StatusOr<int64_t> GrantLease(int64_t ttl_seconds);
  // Renews the lease for its TTL. NotFound when it has expired (its keys are gone).
  absl::Status KeepAlive(int64_t lease_id);
  // Ends the lease now; its keys are deleted. OK when it had already expired.
  absl::Status RevokeLease(int64_t lease_id);

  // "etcd://10.0.0.5:2379,10.0.0.6:2379"
  std::string Describe() const;

 private:
  struct Endpoint {
    std::string address;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
    std::unique_ptr<etcdserverpb::Auth::Stub> auth;
  };
  // The token to send ("" without a login), authenticating on `endpoint` when there is none yet.
  absl::StatusOr<std::string> Token(Endpoint& endpoint, bool renew);
  // Runs `call` on the endpoint that answered last, then on each other one while the failure
  // is one another endpoint may not have (unreachable, timed out).
  absl::Status Call(const std::string& what,
                    const std::function<grpc::Status(Endpoint&, grpc::ClientContext&)>& call);
  // Runs `ops` if `key`'s mod_revision is `expected_mod_revision`; Aborted naming `what` if not.
  absl::StatusOr<int64_t> TxnIfUnchanged(const std::string& what, const std::string& key,
                                         int64_t expected_mod_revision,
                                         std::vector<etcdserverpb::RequestOp> ops);

  const absl::Duration call_timeout_;
  std::vector<Endpoint> endpoints_;
  std::atomic<size_t> current_{0};
  const Login login_;
  absl::Mutex token_mu_;
  std::string token_ ABSL_GUARDED_BY(token_mu_);
};

// The smallest key greater than every key that starts with `prefix` (etcd's range_end for a
// prefix); "\0" when there is none (every key from `prefix` on).
std::string PrefixRangeEnd(const std::string& prefix);

}  // namespace metaload

#endif  // METALOAD_DAEMON_REGISTRY_ETCD_ETCD_CLIENT_H_
