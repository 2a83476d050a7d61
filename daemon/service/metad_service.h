// metad's gRPC service (metaload.v1.Metad), callback API: a thin layer that validates each
// request once (daemon/requests/request_checks.h), delegates to Membership / ModelRegistry /
// PlanCache / PrepareRegistration / MetaTensorStore / RangeWriter, and encodes. No reaction blocks: file
// access, header and skeleton parsing and planning run as jobs on the service's work queues, which finish the
// RPC; a node agent forwards model and plan calls to the coordinator asynchronously.
//
// The service outlives the gRPC servers it is registered with: daemon/main.cc rebuilds the
// server (on the same port) when its listener stops accepting, and the state stays.
//
// Thread-safety: gRPC calls handlers concurrently; all shared state is internally locked.
#ifndef METALOAD_DAEMON_SERVICE_METAD_SERVICE_H_
#define METALOAD_DAEMON_SERVICE_METAD_SERVICE_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/config/node_config.h"
#include "daemon/exec/answer_limit.h"
#include "daemon/exec/work_queue.h"
#include "daemon/membership/membership.h"
#include "daemon/plans/plan_cache.h"
#include "daemon/registration/meta_tensor_store.h"
#include "daemon/registry/model_registry.h"
#include "daemon/serving/read_range/chunk_fault.h"
#include "daemon/serving/read_range/chunk_pool.h"
#include "daemon/serving/read_range/stream_table.h"
#include "daemon/serving/served_ranges_cache.h"
#include "proto/metaload.grpc.pb.h"
#include "security/server_security.h"

namespace metaload {

// ReadRange is served raw (grpc::ByteBuffer) so chunks are sent without protobuf's copies
// (daemon/serving/read_range/range_writer.h); GetPlan too, so that a coordinator writes a rank's answer from
// pre-serialized pieces and a node agent forwards it without parsing it (proto/plan_wire.h).
// The bytes on the wire are the same messages.
class MetadService final : public v1::Metad::WithRawCallbackMethod_GetPlan<
                               v1::Metad::WithRawCallbackMethod_ReadRange<v1::Metad::CallbackService>> {
 public:
  // `meta` must outlive this.
  // `security`: what every call must present, and what this daemon presents to others.
  MetadService(NodeConfig config, ServerSecurity security, MetaTensorStore* meta);
  ~MetadService() override;

  // Call once, right after the server first starts: the address others dial (with `listen:
  // host:0` only known then) and whether this daemon is the coordinator (daemon/
  // self_address.h). Until then every RPC is UNAVAILABLE ("starting").
  void SetBoundAddress(const std::string& address, bool is_coordinator);

  // The coordinator, before SetBoundAddress: serves every model `store` holds, validated
  // like a RegisterModel request (a record that fails, or whose files registered on this node
  // are gone, is logged as an error naming where it was read from and skipped), then persists
  // every later change there. An error only when the store cannot be read at all. `store`
  // must outlive this.
  absl::Status RestoreRegistry(RecordStore* store);

  // A registry shared by peers (etcd; daemon/registry/etcd/etcd_syncer.h). Every daemon then answers
  // every call itself, like a coordinator; registrations and removals are written to `store`
  // before memory; a model asked for that this daemon does not hold yet is read with `fetch`
  // once before the answer is NOT_FOUND (registered on another peer a moment ago); Join and
  // PublishModel are refused (members join through the registry).
  struct SharedRegistry {
    RecordStore* store = nullptr;  // must outlive this
    // The record of a name as the registry holds it now; nullopt when it holds none. Blocks.
    // The next write of the name expects it unchanged (EtcdRecordStore::GetForUpdate).
    std::function<absl::StatusOr<std::optional<StoredRecord>>(const std::string& name)> fetch;
    std::string describe;  // "etcd://10.0.0.5:2379", for GetStatus
  };
  // Call once, before SetBoundAddress(address, /*is_coordinator=*/true).
  void ShareRegistry(SharedRegistry registry);
  // What the peer syncer feeds (EtcdSyncer::Sink): the other members as the registry lists them;
  // a record written by another peer, validated like a RegisterModel request (the error says
  // why it is not used); a model removed by another peer; the models held.
  void SyncMembers(const std::vector<v1::NodeInfo>& members);
  absl::Status ApplySharedModel(const v1::ModelRecord& record);
  void DropSharedModel(const std::string& name);
  std::vector<std::string> ModelNames() const;

  grpc::ServerUnaryReactor* RegisterModel(grpc::CallbackServerContext* ctx,
                                          const v1::RegisterModelRequest* request,
                                          v1::RegisterModelResponse* response) override;
  grpc::ServerUnaryReactor* UnregisterModel(grpc::CallbackServerContext* ctx,
                                            const v1::UnregisterModelRequest* request,
                                            v1::UnregisterModelResponse* response) override;
  grpc::ServerUnaryReactor* GetPlan(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetLayout(grpc::CallbackServerContext* ctx, const v1::GetLayoutRequest* request,
                                      v1::GetLayoutResponse* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* ReadRange(grpc::CallbackServerContext* ctx,
                                                        const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* ctx, const v1::GetStatusRequest* request,
                                      v1::GetStatusResponse* response) override;
  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx, const v1::JoinRequest* request,
                                 v1::JoinResponse* response) override;
  grpc::ServerUnaryReactor* PublishModel(grpc::CallbackServerContext* ctx,
                                         const v1::PublishModelRequest* request,
                                         v1::PublishModelResponse* response) override;

  // Node agents: joins (or re-joins) the coordinator; blocks up to `timeout`. Not on a reaction.
  // `leaving`: tells the coordinator this daemon is stopping, so new plans leave it out now.
  absl::Status JoinCoordinator(absl::Duration timeout, bool leaving = false);
  // After SIGTERM: GetStatus says so (the gRPC server refuses new calls itself).
  void MarkStopping() { stopping_.store(true); }
  uint32_t streams_in_flight() const { return streams_in_flight_.load(); }
  const ServerSecurity& security() const { return security_; }
  v1::NodeInfo self() const;
  const NodeConfig& config() const { return config_; }
  bool is_coordinator() const { return role_.load() == Role::kCoordinator; }
  // Samples this process's resident memory for GetStatus (which must not read /proc on a
  // reaction); daemon/main.cc calls it about once a second.
  void SampleResidentMemory();

 private:
  enum class Role { kStarting, kCoordinator, kAgent };

  // Join and PublishModel, sent to a peer by a node configured with a coordinator.
  absl::Status RefusedByPeer() const;
  // Finishes at once with UNAUTHENTICATED when the call lacks the token, or UNAVAILABLE while
  // starting; else nullptr. Every unary handler's first line.
  grpc::ServerUnaryReactor* RefuseEarly(grpc::CallbackServerContext* ctx);
  // The first refusal for a call, or OK: the token, then starting.
  absl::Status EarlyRefusal(const grpc::CallbackServerContext& ctx) const;
  // Runs `job` on `queue`, or finishes `reactor` with RESOURCE_EXHAUSTED when it is full.
  void Post(WorkQueue& queue, grpc::ServerUnaryReactor* reactor, std::function<void()> job);
  // A registration with digests stops reading once `caller`'s deadline passes or it is cancelled.
  absl::Status Register(const v1::RegisterModelRequest& request, v1::RegisterModelResponse* response,
                        v1::ModelRecord* to_publish, const grpc::CallbackServerContext& caller);
  // Peers: makes what this daemon holds under `name` what the shared registry holds now
  // (applied, or dropped when absent). Blocks on the registry: call from a work queue only.
  // Without a shared registry, or when it cannot be read (logged), nothing changes.
  void RefreshFromRegistry(const std::string& name);
  // The model `name`, asking the shared registry once before answering NotFound.
  absl::StatusOr<std::shared_ptr<const RegisteredModel>> FindModel(const std::string& name);
  absl::StatusOr<std::shared_ptr<const PlannedModel>> Plan(const std::string& model, int world_size,
                                                           const StrategyOptions& options);
  absl::StatusOr<v1::GetLayoutResponse> Layout(const std::string& model);
  // RangeServing::allow: whether every byte of `runs` in `path` lies inside a tensor of
  // `model`, from this daemon's own records (coordinator, peers) or its coordinator's (agents,
  // through served_ranges_). Blocks: call from the io queue only.
  absl::Status AllowRead(const std::string& model, const std::string& path, const StridedRuns& runs);
  // Agents: what the coordinator says `model` allows (GetLayout). Blocks.
  absl::StatusOr<ServedRanges> FetchServedRanges(const std::string& model);

  const NodeConfig config_;
  const ServerSecurity security_;
  mutable absl::Mutex self_mu_;
  v1::NodeInfo self_ ABSL_GUARDED_BY(self_mu_);
  std::atomic<Role> role_{Role::kStarting};
  MetaTensorStore* const meta_;
  // Used when this daemon is the coordinator (or a peer).
  Membership members_;
  ModelRegistry registry_;
  PlanCache plans_;
  std::optional<SharedRegistry> shared_;                // set before role_, then only read
  std::shared_ptr<grpc::Channel> coordinator_channel_;  // agents only; set before role_
  std::unique_ptr<v1::Metad::Stub> coordinator_stub_;   // on coordinator_channel_
  std::unique_ptr<grpc::GenericStub> coordinator_raw_;  // the same channel, for raw forwarding
  std::unique_ptr<ServedRangesCache> served_ranges_;    // agents only; set before role_
  std::atomic<uint64_t> bytes_served_{0};
  std::atomic<uint32_t> streams_in_flight_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> resident_bytes_{0};
  // ReadRange payload buffers: two per stream in flight, up to 64 kept for reuse.
  ChunkPool chunk_pool_{config_.chunk_bytes, 64};
  ChunkFault chunk_fault_ = ChunkFault::FromEnvironment();  // tests only; warns at start when set
  StreamTable streams_;                                     // ReadRange admission and idle timeout
  const absl::Time started_ = absl::Now();
  // Last: their destructors run the jobs still queued while everything above is alive.
  WorkQueue planning_;        // plans, skeleton parsing
  WorkQueue io_;              // file opens and reads, checkpoint headers
  AnswerLimit plan_answers_;  // GetPlan answers in flight (on planning_)
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVICE_METAD_SERVICE_H_
