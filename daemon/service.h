// metad's gRPC service (metaload.v1.Metad), callback API: a thin layer that decodes,
// delegates to ClusterState / PrepareRegistration / MetaStore / ReadOnlyFile, and encodes.
// A node agent forwards model and plan calls to the coordinator without blocking a thread.
//
// Thread-safety: gRPC calls handlers concurrently; all shared state is internally locked.
#ifndef METALOAD_DAEMON_SERVICE_H_
#define METALOAD_DAEMON_SERVICE_H_

#include <atomic>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/chunk_pool.h"
#include "daemon/cluster_state.h"
#include "daemon/meta_store.h"
#include "daemon/node_config.h"
#include "proto/metaload.grpc.pb.h"

namespace metaload {

// ReadRange is served raw (grpc::ByteBuffer) so chunks are sent without protobuf's copies
// (daemon/range_writer.h); the bytes on the wire are the same ReadRangeChunk messages.
class MetadService final : public v1::Metad::WithRawCallbackMethod_ReadRange<v1::Metad::CallbackService> {
 public:
  // `meta` must outlive this.
  MetadService(NodeConfig config, MetaStore* meta);

  // Call once, right after the server starts: the address others dial (with `listen:
  // host:0` only known then). The coordinator then lists itself as a member.
  void SetBoundAddress(const std::string& address);

  grpc::ServerUnaryReactor* RegisterModel(grpc::CallbackServerContext* ctx, const v1::RegisterModelRequest* request,
                                          v1::RegisterModelResponse* response) override;
  grpc::ServerUnaryReactor* GetPlan(grpc::CallbackServerContext* ctx, const v1::GetPlanRequest* request,
                                    v1::GetPlanResponse* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* ReadRange(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* ctx, const v1::GetStatusRequest* request,
                                      v1::GetStatusResponse* response) override;
  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx, const v1::JoinRequest* request,
                                 v1::JoinResponse* response) override;
  grpc::ServerUnaryReactor* PublishModel(grpc::CallbackServerContext* ctx, const v1::PublishModelRequest* request,
                                         v1::PublishModelResponse* response) override;

  // Node agents: joins (or re-joins) the coordinator; blocks up to `timeout`.
  absl::Status JoinCoordinator(absl::Duration timeout);
  v1::NodeInfo self() const;

 private:
  bool is_coordinator() const { return coordinator_stub_ == nullptr; }

  const NodeConfig config_;
  mutable absl::Mutex self_mu_;
  v1::NodeInfo self_ ABSL_GUARDED_BY(self_mu_);
  MetaStore* const meta_;
  ClusterState state_;  // used when this daemon is the coordinator
  std::unique_ptr<v1::Metad::Stub> coordinator_stub_;  // null on the coordinator
  std::atomic<uint64_t> bytes_served_{0};
  // ReadRange payload buffers: two per stream in flight, up to 64 kept for reuse.
  ChunkPool chunk_pool_{config_.chunk_bytes, 64};
  const absl::Time started_ = absl::Now();
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVICE_H_
