// The coordinator's backend (backend.h): this daemon holds the cluster's registry and its
// members. Node agents Join it and publish the models registered on them; it plans, and
// answers every rank from a plan computed once (daemon/plans/). Its registry is memory, or
// persisted in a RecordStore (the embedded one under state_dir, registry/) from Restore on.
//
//   auto coordinator = std::make_unique<Coordinator>(service.BindAddress(address));
//   ML_RETURN_IF_ERROR(coordinator->Restore(store));   // with a state_dir
//   ML_RETURN_IF_ERROR(coordinator->RestoreBindings(store));
//   service.Start(std::move(coordinator));
//
// Thread-safety: every method may be called concurrently; the state is internally locked
// (Membership, ModelRegistry and PlanCache each have their own mutex and never call into one
// another while holding it).
#ifndef METALOAD_DAEMON_SERVICE_COORDINATOR_H_
#define METALOAD_DAEMON_SERVICE_COORDINATOR_H_

#include <memory>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/membership/binding_store.h"
#include "daemon/membership/membership.h"
#include "daemon/plans/plan_cache.h"
#include "daemon/registry/model_registry.h"
#include "daemon/registry/record_store.h"
#include "daemon/service/backend.h"

namespace metaload {

class Coordinator : public Backend {
 public:
  // Servers listed per file in one rank's answer: its own node's daemon first, then the others
  // least loaded first, ties spread over the ranks. Bounds what a rank receives however large
  // the cluster, yet lists every server of a file a handful serve, so that a rank can fail
  // over to each (client/read/source_order.h).
  static constexpr int kServersPerFile = 8;

  explicit Coordinator(BackendContext context);

  // Before the service starts: serves every model `store` holds, validated like a PublishModel
  // request (a record that fails, or whose files registered on this node are gone, is logged
  // as an error naming where it was read from and skipped), then persists every later change
  // there. An error only when the store cannot be read at all. `store` must outlive this.
  absl::Status Restore(RecordStore* store);
  // Before the service starts: every member name bound before a restart (`store`, under
  // state_dir) is held for its identity, down until it joins; every later binding and release
  // is kept there. `store` must outlive this.
  absl::Status RestoreBindings(BindingStore* store);

  RoleStatus Status() const override;
  std::string coordinator() const override { return context_.self.address; }
  void Record(Registration prepared, bool replace, UnaryCall* call) override;
  void Unregister(const v1::UnregisterModelRequest* request, v1::UnregisterModelResponse* response,
                  UnaryCall* call) override;
  void Plan(const grpc::ByteBuffer* raw_request, std::shared_ptr<const v1::GetPlanRequest> request,
            grpc::ByteBuffer* raw_response, UnaryCall* call) override;
  void Layout(const v1::GetLayoutRequest* request, v1::GetLayoutResponse* response, UnaryCall* call) override;
  absl::StatusOr<OpenedFileCheck> AllowRead(const std::string& model, const std::string& path,
                                            const StridedRuns& runs) override;
  absl::Status Takes(MemberCall call) const override;
  absl::Status Join(const NodeSpec& node, bool leaving, uint32_t read_streams, const Caller& caller) override;
  absl::Status Release(const std::string& node, const Caller& caller) override;
  void Publish(const v1::PublishModelRequest* request, const Caller& caller, UnaryCall* call) override;
  // A member gone down (not heard from for member_timeout, or no longer listed by a shared
  // registry): one line each.
  void LogExpired() override;

 protected:
  // Makes what this daemon holds under `name` what a shared registry holds now (Peer, peer.h).
  // A coordinator's registry is its own: nothing to learn. Blocks: call from a work queue only.
  virtual void RefreshFromRegistry(const std::string& /*name*/) {}

  const BackendContext context_;
  Membership members_;
  ModelRegistry registry_;

 private:
  // The model `name`, after asking the shared registry once when it is not held (registered on
  // another peer a moment ago). Blocks.
  absl::StatusOr<std::shared_ptr<const RegisteredModel>> FindModel(const std::string& name);
  // RegisterModel's record and skeleton, held here. On the io queue.
  absl::Status RecordHere(const Registration& prepared, bool replace);
  // Answers `call` from `planned` once a slot of plan_answers is free.
  void Answer(std::shared_ptr<const v1::GetPlanRequest> request, std::shared_ptr<const PlannedModel> planned,
              grpc::ByteBuffer* raw_response, UnaryCall* call);
  // What GetPlan sends: one rank's part, or the whole plan. On the planning queue.
  absl::StatusOr<std::string> AnswerBytes(const v1::GetPlanRequest& request,
                                          const PlannedModel& planned) const;
  // A rank's plan was answered: the load log hears of it (serving/load_log.h).
  void LogPlanAnswered(const v1::GetPlanRequest& request, const PlannedModel& planned,
                       const UnaryCall& call) const;
  absl::StatusOr<v1::GetLayoutResponse> LayoutOf(const std::string& model);
  // What GetPlan and GetLayout answer as server_certificate: tls.node_certificate under mutual
  // TLS, else "" (nothing binds a member's server to its name).
  std::string ServerCertificatePattern() const;

  // Writes whose `name` is now (or that nobody's) to bindings_, on the io queue: the name is
  // marked, and one job at a time writes every marked name (WriteBindings). A flood of new
  // names then holds one io thread, not all of them waiting on each other's fsync (issue 35).
  void KeepBinding(const std::string& name);
  void WriteBindings();

  PlanCache plans_;
  BindingStore* bindings_ = nullptr;  // set before serving, by RestoreBindings
  absl::Mutex bindings_mu_;
  std::set<std::string> unwritten_bindings_
      ABSL_GUARDED_BY(bindings_mu_);                             // at most the members and releases
  bool writing_bindings_ ABSL_GUARDED_BY(bindings_mu_) = false;  // a WriteBindings job is posted
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVICE_COORDINATOR_H_
