// The role half of metad's RPCs: what a daemon does with a call once MetadService
// (metad_service.h) has checked the caller and the request. One implementation is chosen
// once, at start (node.h), by the node config:
//   Coordinator (coordinator.h)  holds the registry (persisted under state_dir, if set), the
//                                members that Join, and the plans made from them;
//   Peer (peer.h)                answers like a coordinator, from a registry and membership
//                                kept in etcd and shared by every daemon;
//   Agent (agent.h)              a node agent: forwards model and plan calls to its
//                                coordinator, publishes the models registered on it.
//
// No method blocks a gRPC thread unless it says so: file access, parsing and planning run on
// the work queues (BackendContext), forwarding uses asynchronous stubs. A method given a
// UnaryCall finishes it exactly once, from any thread.
//
// Thread-safety: every method may be called concurrently.
#ifndef METALOAD_DAEMON_SERVICE_BACKEND_H_
#define METALOAD_DAEMON_SERVICE_BACKEND_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/config/node_config.h"
#include "daemon/exec/answer_limit.h"
#include "daemon/exec/work_queue.h"
#include "daemon/membership/membership.h"
#include "daemon/registration/meta_tensor_store.h"
#include "daemon/registration/registrar.h"
#include "daemon/registry/model_registry.h"
#include "daemon/service/unary_call.h"
#include "daemon/serving/load_log.h"
#include "planner/plan/cluster.h"
#include "proto/metaload.grpc.pb.h"
#include "security/server_security.h"
#include "util/fs/file_system.h"
#include "util/strided_runs.h"

namespace metaload {

// What every backend works with, owned by the service (which outlives the backend's jobs).
struct BackendContext {
  const NodeConfig* config = nullptr;
  const ServerSecurity* security = nullptr;
  NodeSpec self;  // this daemon, at the address it is reached at
  MetaTensorStore* meta = nullptr;
  WorkQueue* planning = nullptr;           // answers from plans held, skeleton parsing
  WorkQueue* builds = nullptr;             // plans to compute, one at a time
  WorkQueue* io = nullptr;                 // file access
  FileSystem* file_system = nullptr;       // what checkpoint files are read through
  AnswerLimit* plan_answers = nullptr;     // GetPlan answers built or sent at once (on planning)
  std::function<uint32_t()> read_streams;  // the ReadRange streams this daemon serves now
  LoadLog* loads = nullptr;                // the loads it takes part in, for the log
};

// Who sent a call: its peer address, its identity and roles (security/server_security.h).
struct Caller {
  std::string peer;
  std::string identity;
  RoleSet roles = kNoRoles;
  std::string certificate_name;  // mutual TLS: the name its certificate gives; else empty
  bool certificate = false;      // mutual TLS: it presented a client certificate (named or not)
};

// A registered model as GetStatus lists it.
struct ModelSummary {
  std::shared_ptr<const RegisteredModel> model;
  std::optional<int64_t> meta_tensor_count;  // as this daemon holds them; nullopt: not held
};

// What GetStatus says of the role; the service adds what every daemon says of itself.
struct RoleStatus {
  bool is_coordinator = false;
  std::string registry;  // a shared registry's, "etcd://10.0.0.5:2379"; empty for none
  // A coordinator's (and a peer's): the members known, up to the bounds of Membership::States
  // (the live ones among them in `members`), every member counted, the models.
  std::vector<NodeSpec> members;
  std::vector<MemberStatus> member_states;
  uint32_t members_up = 0, members_down = 0, members_left = 0;
  std::vector<ModelSummary> models;
  uint32_t plans_cached = 0;  // a coordinator's plan cache (plans/plan_cache.h)
  uint64_t plan_cache_bytes = 0;
};

// The calls only a coordinator takes.
enum class MemberCall { kJoin, kPublishModel };

class Backend {
 public:
  virtual ~Backend() = default;

  virtual RoleStatus Status() const = 0;
  // The address this daemon's registrations and plans go to: its own, or its coordinator's.
  virtual std::string coordinator() const = 0;

  // RegisterModel, once PrepareRegistration has read the checkpoint: records `prepared` here
  // or publishes it to the coordinator, then holds its meta tensors. Runs on the registration or digests
  // queue (it may block there).
  virtual void Record(Registration prepared, bool replace, UnaryCall* call) = 0;
  virtual void Unregister(const v1::UnregisterModelRequest* request, v1::UnregisterModelResponse* response,
                          UnaryCall* call) = 0;
  // GetPlan: writes the answer's bytes into `raw_response` (the service appends answered_by).
  // `raw_request` is `request` as received, for forwarding untouched.
  virtual void Plan(const grpc::ByteBuffer* raw_request, std::shared_ptr<const v1::GetPlanRequest> request,
                    grpc::ByteBuffer* raw_response, UnaryCall* call) = 0;
  virtual void Layout(const v1::GetLayoutRequest* request, v1::GetLayoutResponse* response,
                      UnaryCall* call) = 0;
  // ReadRange's `allow` (serving/read_range/range_writer.h): whether every byte of `runs` in
  // `path` lies inside a tensor of `model` as its record says; if so, what the file must then
  // hold once opened (ServedRanges::CheckOpened: a record this daemon did not build is checked
  // against the file's own header). Blocks: call from the io queue only.
  virtual absl::StatusOr<OpenedFileCheck> AllowRead(const std::string& model, const std::string& path,
                                                    const StridedRuns& runs) = 0;

  // OK when this daemon takes `call` (a coordinator); else the refusal that says where to go
  // instead. Asked before the request is judged; Join and Publish refuse as it does.
  virtual absl::Status Takes(MemberCall call) const = 0;
  // Join, after CheckNodeInfo passed: in memory, does not block.
  virtual absl::Status Join(const NodeSpec& node, bool leaving, uint32_t read_streams,
                            const Caller& caller) = 0;
  // Join with `release` (an admin's, metactl release): forgets the member `node` and whose it
  // was. In memory, does not block.
  virtual absl::Status Release(const std::string& node, const Caller& caller) = 0;
  // PublishModel, after CheckModelRecord passed.
  virtual void Publish(const v1::PublishModelRequest* request, const Caller& caller, UnaryCall* call) = 0;

  // About once a second, from the main thread: logs what changes with time alone (a member
  // not heard from for member_timeout is down). Default: nothing.
  virtual void LogExpired() {}
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVICE_BACKEND_H_
