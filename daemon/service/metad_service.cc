#include "daemon/service/metad_service.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "daemon/registration/registrar.h"
#include "daemon/requests/refusal_log.h"
#include "daemon/requests/request_checks.h"
#include "daemon/requests/request_limits.h"
#include "daemon/serving/read_range/range_writer.h"
#include "proto/convert.h"
#include "proto/plan_wire.h"
#include "proto/raw_message.h"
#include "util/error_kind.h"
#include "util/identifiers.h"
#include "util/log.h"
#include "util/proc_memory.h"

namespace metaload {
namespace {

// Jobs waiting per queue before new requests are refused (RESOURCE_EXHAUSTED, retry later).
constexpr size_t kMaxQueuedJobs = 4096;
// GetPlan answers built or being sent at once: enough to keep the connections busy, few
// enough that a job's 1,024 ranks asking together never hold 1,024 answers in memory.
constexpr size_t kPlanAnswersInFlight = 32;

// Registrations read headers (and, separately, hash checkpoints) on queues of their own: slow
// ones hold these threads, never the io queue's, which serves ReadRange (issue 23: 4 slow
// registrations held all 4 io threads and a read of another model went unanswered for 400 s).
constexpr int kRegistrationThreads = 2;

int IoThreads() { return static_cast<int>(std::clamp(2 * std::thread::hardware_concurrency(), 4u, 32u)); }

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// A request refused by its checks, logged as every refusal is (requests/refusal_log.h).
grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* ctx, const char* method,
                                 const absl::Status& why) {
  LogRefusal(method, PeerHost(ctx->peer()), why);
  return FinishNow(ctx, why);
}

// A stream that fails before its first message.
class FailedWriter final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit FailedWriter(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

MetadService::MetadService(NodeConfig config, ServerSecurity security, MetaTensorStore* meta,
                           ServiceSeams seams)
    : config_(std::move(config)),
      security_(std::move(security)),
      meta_(meta),
      seams_(seams),
      self_{config_.node, config_.listen, config_.gpus, config_.gpu_memory_bytes, config_.roots},
      streams_(StreamTable::Options{config_.node, config_.max_streams, config_.max_streams_per_client,
                                    config_.idle_stream_timeout}),
      uploads_(StreamTable::Options{config_.node, kMaxUploads, kMaxUploadsPerClient,
                                    config_.idle_stream_timeout, "uploads",
                                    absl::StrCat("at most ", kMaxUploads),
                                    absl::StrCat("at most ", kMaxUploadsPerClient, " from one client")}),
      upload_bytes_(kUploadBytesPerMaxRequest * config_.max_request_bytes),
      planning_("planning", 2, kMaxQueuedJobs),
      io_("io", IoThreads(), kMaxQueuedJobs),
      registration_("registration", kRegistrationThreads, kMaxQueuedJobs),
      digests_("digests", kRegistrationThreads, kMaxQueuedJobs),
      plan_answers_(kPlanAnswersInFlight, &planning_, kMaxQueuedJobs),
      builds_("builds", 1, kMaxQueuedJobs) {}

MetadService::~MetadService() = default;

BackendContext MetadService::BindAddress(const std::string& address) {
  BackendContext context;
  {
    absl::MutexLock lock(&self_mu_);
    self_.address = address;
    context.self = self_;
  }
  context.config = &config_;
  context.security = &security_;
  context.meta = meta_;
  context.planning = &planning_;
  context.builds = &builds_;
  context.io = &io_;
  context.file_system = seams_.file_system;
  context.plan_answers = &plan_answers_;
  context.read_streams = [this] { return streams_in_flight_.load(); };
  context.loads = &loads_;
  return context;
}

void MetadService::Start(std::unique_ptr<Backend> backend) {
  SampleResidentMemory();
  backend_owner_ = std::move(backend);
  backend_.store(backend_owner_.get(), std::memory_order_release);
}

NodeSpec MetadService::self() const {
  absl::MutexLock lock(&self_mu_);
  return self_;
}

ServiceStats MetadService::Stats() const {
  ServiceStats stats;
  stats.bytes_served = bytes_served_.load();
  stats.streams_in_flight = streams_in_flight_.load();
  stats.uploads_in_flight = uploads_.in_flight();
  stats.streams_refused = streams_.refusals();
  stats.uploads_refused = uploads_.refusals();
  stats.read_errors = read_errors_.load();
  stats.resident_bytes = resident_bytes_.load();
  stats.stopping = stopping_.load();
  if (const Backend* backend = backend_.load(std::memory_order_acquire); backend != nullptr) {
    stats.started = true;
    stats.role = backend->Status();
  }
  return stats;
}

void MetadService::SampleResidentMemory() { resident_bytes_.store(ResidentBytes()); }

void MetadService::LogQuietChanges() {
  loads_.EndQuiet();
  if (Backend* backend = backend_.load(std::memory_order_acquire); backend != nullptr) backend->LogExpired();
}

absl::StatusOr<Caller> MetadService::EarlyRefusal(const grpc::CallbackServerContext& ctx, RoleSet any_of,
                                                  const char* method) const {
  absl::StatusOr<Caller> caller = EarlyRefusalUnlogged(ctx, any_of, method);
  if (!caller.ok()) LogRefusal(method, PeerHost(ctx.peer()), caller.status());
  return caller;
}

absl::StatusOr<Caller> MetadService::EarlyRefusalUnlogged(const grpc::CallbackServerContext& ctx,
                                                          RoleSet any_of, const char* method) const {
  absl::StatusOr<CallerAuth> auth = Authenticate(ctx, security_);
  if (!auth.ok())
    return absl::Status(auth.status().code(), absl::StrCat(config_.node, ": ", auth.status().message()));
  if (absl::Status allowed = CheckRole(*auth, any_of, method); !allowed.ok()) {
    return absl::Status(allowed.code(), absl::StrCat(config_.node, ": ", allowed.message()));
  }
  if (backend_.load(std::memory_order_acquire) == nullptr) {
    return TryAgainError(absl::StrCat(config_.node, " is starting; try again"));
  }
  return Caller{ctx.peer(), auth->identity, auth->roles, auth->certificate_name, auth->certificate};
}

grpc::ServerUnaryReactor* MetadService::RefuseEarly(grpc::CallbackServerContext* ctx, RoleSet any_of,
                                                    const char* method, Caller* caller) {
  absl::StatusOr<Caller> refused = EarlyRefusal(*ctx, any_of, method);
  if (!refused.ok()) return FinishNow(ctx, refused.status());
  if (caller != nullptr) *caller = *std::move(refused);
  return nullptr;
}

UploadLimits MetadService::Limits(const char* method, const Caller& caller) {
  // An identity of its own (a certificate, a token of auth_tokens) is one client wherever it
  // connects from (issue 35: four loopback addresses took four hosts' share); the shared ones
  // count per host.
  return UploadLimits{config_.node,
                      method,
                      config_.max_request_bytes,
                      &upload_bytes_,
                      &uploads_,
                      &registration_,
                      IsSharedIdentity(caller.identity) ? "" : caller.identity,
                      config_.idle_stream_timeout};
}

grpc::ServerReadReactor<v1::UploadChunk>* MetadService::RegisterModel(grpc::CallbackServerContext* ctx,
                                                                      v1::RegisterModelResponse* response) {
  // Refused on its headers, before a byte of the upload is read: only an admin uploads a skeleton.
  absl::StatusOr<Caller> caller = EarlyRefusal(*ctx, Bit(Role::kAdmin), "RegisterModel");
  if (!caller.ok()) return UploadCall::Refuse(caller.status());
  return UploadCall::Start<v1::RegisterModelRequest>(
      ctx, Limits("RegisterModel", *caller),
      [this, response](const v1::RegisterModelRequest& request, UnaryCall* call) {
        if (absl::Status valid = CheckRegisterModelRequest(request); !valid.ok()) {
          LogRefusal("RegisterModel", PeerHost(call->context().peer()), valid);
          call->Finish(valid);
          return;
        }
        Prepare(request, response, call);  // here, on the registration queue
      });
}

void MetadService::Prepare(const v1::RegisterModelRequest& request, v1::RegisterModelResponse* response,
                           UnaryCall* call) {
  absl::StatusOr<Registration> prepared = ReadRegistrationHeaders(request, config_, seams_.file_system);
  if (!prepared.ok()) {
    LogRegistrationRefused(request.name(), prepared.status());
    call->Finish(prepared.status());
    return;
  }
  if (!request.digest()) {
    Conclude(request, *std::move(prepared), response, call);
    return;
  }
  // Hashing reads the whole checkpoint: on a queue of its own, so that it holds up neither
  // other registrations' headers nor any read.
  auto registration = std::make_shared<Registration>(*std::move(prepared));
  PostOrRefuse(digests_, config_.node, call, [this, &request, response, call, registration] {
    // Stop when the caller has given up (its deadline passed, or it went away: one without a
    // deadline must not keep a worker reading) or the daemon stops.
    const grpc::CallbackServerContext& caller = call->context();
    const auto should_stop = [this, &caller] {
      return stopping_.load() || std::chrono::system_clock::now() > caller.deadline() || caller.IsCancelled();
    };
    if (absl::Status hashed = AddTensorDigests(config_, seams_.file_system, should_stop, *registration);
        !hashed.ok()) {
      LogRegistrationRefused(request.name(), hashed);
      call->Finish(hashed);
      return;
    }
    Conclude(request, std::move(*registration), response, call);
  });
}

void MetadService::Conclude(const v1::RegisterModelRequest& request, Registration prepared,
                            v1::RegisterModelResponse* response, UnaryCall* call) {
  response->set_name(request.name());
  // Counted as `metactl status` counts a registered model: the checkpoint's tensors and their
  // stored bytes (the skeleton also holds buffers no checkpoint stores).
  uint64_t stored_bytes = 0;
  for (const v1::TensorLocation& t : prepared.record.tensors())
    stored_bytes += t.end_offset() - t.begin_offset();
  response->set_tensor_count(prepared.record.tensors_size());
  response->set_total_bytes(stored_bytes);
  response->set_registered_on(config_.node);
  response->set_coordinator(backend().coordinator());
  for (const std::string& name : prepared.not_loaded) response->add_not_loaded(name);
  prepared.checkpoint = Checkpoint{};  // what the backend keeps is the record
  backend().Record(std::move(prepared), request.replace(), call);
}

grpc::ServerUnaryReactor* MetadService::UnregisterModel(grpc::CallbackServerContext* ctx,
                                                        const v1::UnregisterModelRequest* request,
                                                        v1::UnregisterModelResponse* response) {
  if (auto* refused = RefuseEarly(ctx, Bit(Role::kAdmin), "UnregisterModel")) return refused;
  if (absl::Status valid = CheckName("model name", request->name()); !valid.ok())
    return Refuse(ctx, "UnregisterModel", valid);
  UnaryCall* call = UnaryCall::Start(ctx);
  backend().Unregister(request, response, call);
  return call->reactor();
}

grpc::ServerUnaryReactor* MetadService::GetPlan(grpc::CallbackServerContext* ctx,
                                                const grpc::ByteBuffer* raw_request,
                                                grpc::ByteBuffer* raw_response) {
  if (auto* refused = RefuseEarly(ctx, Bit(Role::kReader), "GetPlan")) return refused;
  auto request = std::make_shared<v1::GetPlanRequest>();
  if (!ParseByteBuffer(*raw_request, request.get())) {
    return Refuse(ctx, "GetPlan", absl::InvalidArgumentError("GetPlan: the request is not a GetPlanRequest"));
  }
  if (absl::Status valid = CheckGetPlanRequest(*request); !valid.ok()) return Refuse(ctx, "GetPlan", valid);
  // Whoever wrote the answer, this node answered: its name is appended as answered_by (the
  // last value of a field wins, proto/plan_wire.h).
  UnaryCall* call = UnaryCall::Start(ctx, [this, raw_response] {
    std::string answered_by;
    AppendLengthDelimitedField(kResponseAnsweredByField, config_.node, &answered_by);
    AppendToByteBuffer(std::move(answered_by), raw_response);
  });
  backend().Plan(raw_request, std::move(request), raw_response, call);
  return call->reactor();
}

grpc::ServerUnaryReactor* MetadService::GetLayout(grpc::CallbackServerContext* ctx,
                                                  const v1::GetLayoutRequest* request,
                                                  v1::GetLayoutResponse* response) {
  if (auto* refused = RefuseEarly(ctx, Bit(Role::kReader), "GetLayout")) return refused;
  if (absl::Status valid = CheckName("model name", request->model()); !valid.ok())
    return Refuse(ctx, "GetLayout", valid);
  UnaryCall* call = UnaryCall::Start(ctx, [this, response] { response->set_answered_by(config_.node); });
  backend().Layout(request, response, call);
  return call->reactor();
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* MetadService::ReadRange(grpc::CallbackServerContext* ctx,
                                                                    const grpc::ByteBuffer* raw_request) {
  if (absl::StatusOr<Caller> caller = EarlyRefusal(*ctx, Bit(Role::kReader), "ReadRange"); !caller.ok()) {
    return new FailedWriter(caller.status());
  }
  const std::string client = PeerHost(ctx->peer());
  const auto refuse = [&client](const absl::Status& why) {
    LogRefusal("ReadRange", client, why);
    return new FailedWriter(why);
  };
  v1::ReadRangeRequest request;
  if (!ParseByteBuffer(*raw_request, &request)) {
    return refuse(absl::InvalidArgumentError("ReadRange: the request is not a ReadRangeRequest"));
  }
  if (request.path().empty() || request.path().size() > kMaxPathBytes) {
    return refuse(absl::InvalidArgumentError(absl::StrCat("ReadRange: path ", QuoteForMessage(request.path()),
                                                          " must have 1 to ", kMaxPathBytes, " bytes")));
  }
  if (absl::Status valid = CheckName("ReadRange: model name", request.model()); !valid.ok())
    return refuse(valid);
  absl::StatusOr<StreamTable::Stream*> admitted = streams_.Admit(ctx);
  if (!admitted.ok()) return refuse(admitted.status());
  RangeServing serving{&config_.roots, config_.chunk_bytes, &chunk_pool_,
                       &io_,           &bytes_served_,      &streams_in_flight_,
                       &streams_,      seams_.file_system,  seams_.serving_hooks};
  serving.same_device = config_.same_device;
  serving.read_errors = &read_errors_;
  serving.loads = &loads_;
  Backend* backend = &this->backend();
  serving.allow = [backend](const std::string& model, const std::string& path, const StridedRuns& runs) {
    return backend->AllowRead(model, path, runs);
  };
  return new RangeWriter(std::move(request), serving, *admitted, client);
}

grpc::ServerUnaryReactor* MetadService::GetStatus(grpc::CallbackServerContext* ctx,
                                                  const v1::GetStatusRequest*,
                                                  v1::GetStatusResponse* response) {
  Caller caller;
  if (auto* refused = RefuseEarly(ctx, Bit(Role::kReader), "GetStatus", &caller)) return refused;
  // A reader is told nothing it could not ask otherwise: members' addresses and GPUs (a plan
  // names them) and its models' folders (GetLayout does), but no daemon's roots.
  const bool redact = !Has(caller.roles, Role::kMember) && !Has(caller.roles, Role::kAdmin);
  const auto node_spec = [redact](const NodeSpec& node) {
    v1::NodeInfo out = NodeSpecToProto(node);
    if (redact) out.clear_roots();
    return out;
  };
  const RoleStatus role = backend().Status();
  *response->mutable_self() = node_spec(self());
  response->set_is_coordinator(role.is_coordinator);
  response->set_coordinator(backend().coordinator());
  response->set_registry(role.registry);
  response->set_plans_cached(role.plans_cached);
  response->set_plan_cache_bytes(role.plan_cache_bytes);
  if (role.is_coordinator) {
    v1::MemberCounts* counts = response->mutable_member_counts();
    counts->set_up(role.members_up);
    counts->set_down(role.members_down);
    counts->set_left(role.members_left);
  }
  for (const NodeSpec& node : role.members) *response->add_members() = node_spec(node);
  for (const MemberStatus& member : role.member_states) {
    v1::MemberState* out = response->add_member_states();
    *out->mutable_node() = node_spec(member.node);
    out->set_state(member.state == MemberStatus::kUp     ? "up"
                   : member.state == MemberStatus::kDown ? "down"
                                                         : "left");
    out->set_last_seen_ms(absl::ToInt64Milliseconds(member.since_seen));
  }
  for (const ModelSummary& model : role.models) {
    const ModelRecord& record = model.model->record;
    v1::ModelSummary* summary = response->add_models();
    summary->set_name(record.name);
    summary->set_checkpoint_dir(record.checkpoint.dir);
    summary->set_registered_on(record.registered_on);
    uint64_t total = 0;
    for (const TensorLayout& t : record.checkpoint.tensors) total += t.end_offset - t.begin_offset;
    summary->set_tensor_count(static_cast<int64_t>(record.checkpoint.tensors.size()));
    summary->set_total_bytes(total);
    if (model.meta_tensor_count.has_value()) summary->set_meta_tensor_count(*model.meta_tensor_count);
  }
  response->set_resident_bytes(resident_bytes_.load());
  response->set_bytes_served(bytes_served_.load());
  response->set_streams_in_flight(streams_in_flight_.load());
  response->set_stopping(stopping_.load());
  response->set_uptime_ms(absl::ToInt64Milliseconds(absl::Now() - started_));
  return FinishNow(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* MetadService::Join(grpc::CallbackServerContext* ctx, const v1::JoinRequest* request,
                                             v1::JoinResponse* response) {
  // Joining and leaving are a member's; releasing a name is an admin's.
  Caller caller;
  if (auto* refused = RefuseEarly(ctx, Bit(request->release() ? Role::kAdmin : Role::kMember),
                                  request->release() ? "Join (release)" : "Join", &caller))
    return refused;
  if (absl::Status takes = backend().Takes(MemberCall::kJoin); !takes.ok()) return Refuse(ctx, "Join", takes);
  if (request->release()) {
    if (absl::Status valid = CheckName("node name", request->node().name()); !valid.ok())
      return Refuse(ctx, "Join (release)", valid);
    return FinishNow(ctx, backend().Release(request->node().name(), caller));
  }
  if (absl::Status valid = CheckNodeInfo(request->node()); !valid.ok()) {
    Log(LogLevel::kWarning,
        absl::StrCat("Join from ", QuoteForMessage(ctx->peer()), " refused: ", valid.message()),
        {{"event", "refused"}, {"call", "Join"}, {"reason", valid.message()}});
    return FinishNow(ctx, valid);
  }
  absl::Status joined =
      backend().Join(NodeSpecFromProto(request->node()), request->leaving(), request->read_streams(), caller);
  if (joined.ok() && !request->leaving()) response->set_coordinator(self().address);
  return FinishNow(ctx, joined);
}

grpc::ServerReadReactor<v1::UploadChunk>* MetadService::PublishModel(grpc::CallbackServerContext* ctx,
                                                                     v1::PublishModelResponse*) {
  // A member publishes; replacing a model every rank may be loading is an admin's decision, not
  // any daemon's. Which of the two is asked is known only once the request arrived: neither
  // role, and nothing is read.
  absl::StatusOr<Caller> caller = EarlyRefusal(*ctx, Bit(Role::kMember) | Bit(Role::kAdmin), "PublishModel");
  if (!caller.ok()) return UploadCall::Refuse(caller.status());
  if (absl::Status takes = backend().Takes(MemberCall::kPublishModel); !takes.ok())
    return UploadCall::Refuse(takes);
  UploadLimits limits = Limits("PublishModel", *caller);  // before the lambda takes the caller
  return UploadCall::Start<v1::PublishModelRequest>(
      ctx, std::move(limits),
      [this, caller = *std::move(caller)](const v1::PublishModelRequest& request, UnaryCall* call) {
        const CallerAuth auth{caller.roles, caller.identity, caller.certificate_name};
        if (absl::Status allowed = CheckRole(auth, Bit(request.replace() ? Role::kAdmin : Role::kMember),
                                             request.replace() ? "PublishModel --replace" : "PublishModel");
            !allowed.ok()) {
          call->Finish(absl::Status(allowed.code(), absl::StrCat(config_.node, ": ", allowed.message())));
          return;
        }
        if (absl::Status valid = CheckModelRecord(request.model()); !valid.ok()) {
          call->Finish(valid);
          return;
        }
        backend().Publish(&request, caller, call);
      });
}

}  // namespace metaload
