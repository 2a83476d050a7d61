// metad's gRPC service (metaload.v1.Metad), callback API: a thin layer that checks the caller
// (its token; whether this daemon has started), validates each request once
// (daemon/requests/request_checks.h), hands it to the Backend of this daemon's role
// (backend.h: Coordinator, Peer or Agent, chosen once at start) and encodes the answer. No
// reaction blocks: file access, header and skeleton parsing and planning run as jobs on the
// service's work queues, which finish the RPC; ReadRange streams are served here for every
// role (serving/read_range/range_writer.h), asking the backend what a model allows.
//
//   MetadService service(config, std::move(security), &meta);
//   ... build and start a grpc::Server with it ...
//   service.Start(std::make_unique<Coordinator>(service.BindAddress(address)));
//
// The service outlives the gRPC servers it is registered with: daemon/main.cc rebuilds the
// server (on the same port) when its listener stops accepting, and the state stays.
//
// Thread-safety: gRPC calls handlers concurrently; all shared state is internally locked.
#ifndef METALOAD_DAEMON_SERVICE_METAD_SERVICE_H_
#define METALOAD_DAEMON_SERVICE_METAD_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/config/node_config.h"
#include "daemon/exec/answer_limit.h"
#include "daemon/exec/work_queue.h"
#include "daemon/registration/meta_tensor_store.h"
#include "daemon/registration/registrar.h"
#include "daemon/service/backend.h"
#include "daemon/service/upload_call.h"
#include "daemon/serving/load_log.h"
#include "daemon/serving/read_range/chunk_pool.h"
#include "daemon/serving/read_range/serving_hooks.h"
#include "daemon/serving/read_range/stream_table.h"
#include "proto/metaload.grpc.pb.h"
#include "security/server_security.h"
#include "util/fs/file_system.h"

namespace metaload {

// What a test replaces in-process to make a daemon fail as a disk or a host would; metad
// passes the defaults, metad_faulty its armed faults (tests/faults/). Both must outlive the
// service.
struct ServiceSeams {
  // Every read of checkpoint bytes: ReadRange's files, registration's headers, stats and
  // digests; by default the back end each location's scheme names.
  FileSystem* file_system = FileSystem::ByScheme();
  // Each chunk a ReadRange stream reads and the bytes it serves (serving_hooks.h).
  ServingHooks* serving_hooks = ServingHooks::None();
};

// What metad's metrics report of the service (daemon/metrics/daemon_metrics.h), read at once.
struct ServiceStats {
  uint64_t bytes_served = 0;  // ReadRange payload bytes sent since start
  uint32_t streams_in_flight = 0;
  uint32_t uploads_in_flight = 0;  // RegisterModel and PublishModel uploads
  StreamTable::Refusals streams_refused, uploads_refused;
  uint64_t read_errors = 0;     // ReadRange reads of a file that failed
  uint64_t resident_bytes = 0;  // as last sampled (SampleResidentMemory)
  bool started = false;         // `role` is the backend's; else empty (starting)
  bool stopping = false;
  RoleStatus role;
};

// ReadRange is served raw (grpc::ByteBuffer) so chunks are sent without protobuf's copies
// (serving/read_range/range_writer.h); GetPlan too, so that a coordinator writes a rank's answer
// from pre-serialized pieces and a node agent forwards it without parsing it (proto/plan_wire.h).
// The bytes on the wire are the same messages.
class MetadService final : public v1::Metad::WithRawCallbackMethod_GetPlan<
                               v1::Metad::WithRawCallbackMethod_ReadRange<v1::Metad::CallbackService>> {
 public:
  // `meta` must outlive this.
  // `security`: what every call must present, and what this daemon presents to others.
  MetadService(NodeConfig config, ServerSecurity security, MetaTensorStore* meta, ServiceSeams seams = {});
  ~MetadService() override;

  // Once the server listens: `address` is the one others dial (with `listen: host:0` only
  // known then; daemon/config/self_address.h). Returns what a backend of this service works
  // with. Call once, before Start.
  BackendContext BindAddress(const std::string& address);
  // From now on every call is answered with `backend`; until then every RPC is UNAVAILABLE
  // ("starting"). Call once.
  void Start(std::unique_ptr<Backend> backend);

  // An upload of a RegisterModelRequest (upload_call.h).
  grpc::ServerReadReactor<v1::UploadChunk>* RegisterModel(grpc::CallbackServerContext* ctx,
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
  // An upload of a PublishModelRequest.
  grpc::ServerReadReactor<v1::UploadChunk>* PublishModel(grpc::CallbackServerContext* ctx,
                                                         v1::PublishModelResponse* response) override;

  // After SIGTERM: GetStatus says so, and registrations reading digests stop (the gRPC server
  // refuses new calls itself).
  void MarkStopping() { stopping_.store(true); }
  uint32_t streams_in_flight() const { return streams_in_flight_.load(); }
  const ServerSecurity& security() const { return security_; }
  const NodeConfig& config() const { return config_; }
  NodeSpec self() const;
  // What the metrics report; not on a reaction (the backend's Status takes its locks).
  ServiceStats Stats() const;
  // Samples this process's resident memory for GetStatus (which must not read /proc on a
  // reaction); daemon/main.cc calls it about once a second.
  void SampleResidentMemory();
  // Logs what ends with time alone: loads quiet for 2 s (serving/load_log.h), members gone
  // down (Backend::LogExpired). daemon/metad_main.cc calls it about once a second.
  void LogQuietChanges();
  // Once the server stopped: logs the end of the loads still open (daemon/metad_main.cc).
  void EndLoads() { loads_.EndAll(); }

 private:
  // The backend; REQUIRES: RefuseEarly passed (the service has started).
  Backend& backend() { return *backend_.load(std::memory_order_acquire); }
  // Finishes at once with UNAUTHENTICATED when the call lacks a token this daemon accepts,
  // PERMISSION_DENIED when its credentials hold none of `any_of` (security/roles.h), or
  // UNAVAILABLE while starting; else nullptr, with who called in `caller`. Every unary
  // handler's first line.
  grpc::ServerUnaryReactor* RefuseEarly(grpc::CallbackServerContext* ctx, RoleSet any_of, const char* method,
                                        Caller* caller = nullptr);
  // The first refusal for a call, or who called: the token, the role, then starting.
  absl::StatusOr<Caller> EarlyRefusal(const grpc::CallbackServerContext& ctx, RoleSet any_of,
                                      const char* method) const;  // and logs it (requests/refusal_log.h)
  absl::StatusOr<Caller> EarlyRefusalUnlogged(const grpc::CallbackServerContext& ctx, RoleSet any_of,
                                              const char* method) const;
  // What an upload of `method` may bring.
  UploadLimits Limits(const char* method, const Caller& caller);
  // RegisterModel on the registration queue: reads the checkpoint's headers, then (on the
  // digests queue, with --digest) hashes its tensors, then Conclude.
  void Prepare(const v1::RegisterModelRequest& request, v1::RegisterModelResponse* response, UnaryCall* call);
  // Fills the answer and hands the registration to the backend.
  void Conclude(const v1::RegisterModelRequest& request, Registration prepared,
                v1::RegisterModelResponse* response, UnaryCall* call);

  const NodeConfig config_;
  const ServerSecurity security_;
  MetaTensorStore* const meta_;
  const ServiceSeams seams_;
  mutable absl::Mutex self_mu_;
  NodeSpec self_ ABSL_GUARDED_BY(self_mu_);
  std::unique_ptr<Backend> backend_owner_;  // set once by Start, before backend_
  std::atomic<Backend*> backend_{nullptr};  // null while starting
  std::atomic<uint64_t> bytes_served_{0};
  std::atomic<uint32_t> streams_in_flight_{0};
  std::atomic<uint64_t> read_errors_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> resident_bytes_{0};
  // ReadRange payload buffers: two per stream in flight, up to 64 kept for reuse.
  ChunkPool chunk_pool_{config_.chunk_bytes, 64};
  StreamTable streams_;                // ReadRange admission and idle timeout
  LoadLog loads_{LoadLog::Options{}};  // the loads this daemon takes part in, for the log
  StreamTable uploads_;                // RegisterModel and PublishModel uploads: admission and idle timeout
  UploadBudget upload_bytes_;
  const absl::Time started_ = absl::Now();
  // Last: their destructors run the jobs still queued while everything above (the backend
  // included) is alive.
  WorkQueue planning_;        // answers from plans held, skeleton parsing
  WorkQueue io_;              // ReadRange's file opens and reads; small file work of the backends
  WorkQueue registration_;    // RegisterModel: checkpoint headers, then the backend's Record
  WorkQueue digests_;         // RegisterModel --digest: hashing whole checkpoints
  AnswerLimit plan_answers_;  // GetPlan answers in flight (on planning_)
  // After plan_answers_: its jobs, run by its destructor, hand their answers to it.
  WorkQueue builds_;  // plans to compute, one at a time
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVICE_METAD_SERVICE_H_
