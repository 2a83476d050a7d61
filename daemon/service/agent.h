// A node agent's backend (backend.h): this daemon serves the checkpoint bytes under its roots,
// and its coordinator (the node config's `coordinator`) holds the registry and the members.
// Model and plan calls are forwarded to the coordinator with asynchronous stubs (GetPlan as
// raw bytes, never parsed here); a model registered here is read here, published to the
// coordinator, then held as meta tensors here too. What a ReadRange may read is asked of the
// coordinator and kept a short while (serving/served_ranges_cache.h). The node's joiner
// (membership/joiner.h) keeps it a member through JoinCoordinator.
//
//   auto agent = std::make_unique<Agent>(service.BindAddress(address));
//   Joiner joiner([&](absl::Duration timeout, bool leaving) {
//     return agent->JoinCoordinator(timeout, leaving); });
//
// Thread-safety: every method may be called concurrently.
#ifndef METALOAD_DAEMON_SERVICE_AGENT_H_
#define METALOAD_DAEMON_SERVICE_AGENT_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "daemon/service/backend.h"
#include "daemon/serving/served_ranges_cache.h"

namespace metaload {

class Agent final : public Backend {
 public:
  // Dials the coordinator (nothing is sent until a call needs it).
  explicit Agent(BackendContext context);

  // Answered here. Not a coordinator: no members and no models of its own; Join and
  // PublishModel are refused, naming the coordinator.
  RoleStatus Status() const override { return RoleStatus{}; }
  std::string coordinator() const override { return context_.config->coordinator; }
  absl::Status Takes(MemberCall call) const override;
  absl::Status Join(const NodeSpec& node, bool leaving, uint32_t read_streams, const Caller& caller) override;
  absl::Status Release(const std::string& node, const Caller& caller) override;
  void Publish(const v1::PublishModelRequest* request, const Caller& caller, UnaryCall* call) override;
  // Asked of the coordinator: what it says of the model, kept a short while.
  absl::StatusOr<OpenedFileCheck> AllowRead(const std::string& model, const std::string& path,
                                            const StridedRuns& runs) override;

  // Forwarded to the coordinator as they come (GetPlan as bytes, never parsed here).
  void Plan(const grpc::ByteBuffer* raw_request, std::shared_ptr<const v1::GetPlanRequest> request,
            grpc::ByteBuffer* raw_response, UnaryCall* call) override;
  void Layout(const v1::GetLayoutRequest* request, v1::GetLayoutResponse* response, UnaryCall* call) override;
  // Drops the meta tensors here, and forwards.
  void Unregister(const v1::UnregisterModelRequest* request, v1::UnregisterModelResponse* response,
                  UnaryCall* call) override;
  // Publishes the registration to the coordinator, then holds its meta tensors here.
  void Record(Registration prepared, bool replace, UnaryCall* call) override;

  // Joins (or re-joins) the coordinator; blocks up to `timeout`. Not on a reaction.
  // `leaving`: tells the coordinator this daemon is stopping, so new plans leave it out now.
  absl::Status JoinCoordinator(absl::Duration timeout, bool leaving = false);
  // Whether the coordinator is reachable and lists this daemon (its health, daemon/service/
  // node.h Serving): the last join answered OK (else kFailed), less than `within` ago (else
  // kStale: the joiner is stuck).
  enum class JoinState { kJoined, kFailed, kStale };
  JoinState LastJoin(absl::Duration within) const;

 private:
  struct Publication;  // a registration on its way to the coordinator

  // RegisterModel's steps after the checkpoint was read: published to the coordinator (its
  // answer comes on a gRPC thread), then held here as meta tensors (CPU work: on planning).
  void OnPublished(std::shared_ptr<Publication> publication, const grpc::Status& status);
  void HoldMetaTensors(const Publication& publication);
  // What the coordinator says `model` allows (GetLayout). Blocks.
  absl::StatusOr<ServedRanges> FetchServedRanges(const std::string& model);
  // `status` of a call forwarded to the coordinator, as this daemon answers it.
  absl::Status Forwarded(const grpc::Status& status) const;

  const BackendContext context_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::Metad::Stub> stub_;
  grpc::GenericStub raw_;  // the same channel, for raw forwarding
  // An admin's calls this agent forwards (--replace, unregister), with the admin token of its
  // node config (the member channel when it has none): the coordinator asks for admin itself.
  const std::unique_ptr<v1::Metad::Stub> admin_stub_;
  ServedRangesCache served_ranges_;
  // When the last join that answered OK came, as absl::ToUnixNanos; 0: the last one failed
  // (or none was made yet).
  std::atomic<int64_t> joined_at_ns_{0};
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVICE_AGENT_H_
