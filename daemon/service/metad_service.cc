#include "daemon/service/metad_service.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "daemon/registration/registrar.h"
#include "daemon/requests/request_checks.h"
#include "daemon/serving/read_range/range_writer.h"
#include "proto/convert.h"
#include "proto/plan_answers.h"
#include "proto/plan_wire.h"
#include "util/fs/file_io.h"
#include "util/identifiers.h"
#include "util/log.h"
#include "util/proc_memory.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// Servers listed per file in one rank's answer: its own node's daemon first, then the others
// least loaded first, ties spread over the ranks. Bounds what a rank receives however large
// the cluster, yet lists every server of a file a handful serve, so that a rank can fail over
// to each (client/source_order.h).
constexpr int kServersPerFile = 8;
// Jobs waiting per queue before new requests are refused (RESOURCE_EXHAUSTED, retry later).
constexpr size_t kMaxQueuedJobs = 4096;
// GetPlan answers built or being sent at once: enough to keep the connections busy, few
// enough that a job's 1,024 ranks asking together never hold 1,024 answers in memory.
constexpr size_t kPlanAnswersInFlight = 32;

// A call a node agent forwards to the coordinator ends by its caller's deadline, and at the
// latest after this: a caller that set none must not pin the call, and its reactor, forever on
// a coordinator that never answers.
constexpr absl::Duration kMaxForwardedCall = absl::Minutes(5);

std::chrono::system_clock::time_point ForwardDeadline(std::chrono::system_clock::time_point caller) {
  return std::min(caller, absl::ToChronoTime(absl::Now() + kMaxForwardedCall));
}

int IoThreads() { return static_cast<int>(std::clamp(2 * std::thread::hardware_concurrency(), 4u, 32u)); }

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// The message a raw request holds; false when it is not one.
bool ParseByteBuffer(const grpc::ByteBuffer& buffer, google::protobuf::Message* message) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return false;
  std::string bytes;
  for (const grpc::Slice& slice : slices)
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  return message->ParseFromString(bytes);
}

// `buffer` followed by `bytes`, which it takes over without a copy (the slices already
// there are shared, not copied either).
void AppendToByteBuffer(std::string bytes, grpc::ByteBuffer* buffer) {
  std::vector<grpc::Slice> slices;
  if (buffer->Valid()) (void)buffer->Dump(&slices);
  auto* owned = new std::string(std::move(bytes));
  slices.emplace_back(
      grpc_slice_new_with_user_data(
          owned->data(), owned->size(), [](void* p) { delete static_cast<std::string*>(p); }, owned),
      grpc::Slice::STEAL_REF);
  *buffer = grpc::ByteBuffer(slices.data(), slices.size());
}

// A stream that fails before its first message.
class FailedWriter final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit FailedWriter(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

MetadService::MetadService(NodeConfig config, ServerSecurity security, MetaTensorStore* meta)
    : config_(std::move(config)),
      security_(std::move(security)),
      meta_(meta),
      members_(Membership::Options{.member_timeout = config_.member_timeout}),
      registry_(ModelRegistry::Options{.max_models = config_.max_models,
                                       .max_tensors_per_model = config_.max_tensors_per_model}),
      plans_(PlanCache::Options{}),
      streams_(StreamTable::Options{config_.node, config_.max_streams, config_.max_streams_per_client,
                                    config_.idle_stream_timeout}),
      planning_("planning", 2, kMaxQueuedJobs),
      io_("io", IoThreads(), kMaxQueuedJobs),
      plan_answers_(kPlanAnswersInFlight, &planning_, kMaxQueuedJobs) {
  self_.set_name(config_.node);
  self_.set_address(config_.listen);
  self_.set_gpu_count(config_.gpus);
  self_.set_gpu_memory_bytes(config_.gpu_memory_bytes);
  for (const std::string& root : config_.roots) self_.add_roots(root);
  members_.SetSelfLoad([this] { return streams_in_flight_.load(); });
}

MetadService::~MetadService() = default;

void MetadService::SetBoundAddress(const std::string& address, bool is_coordinator) {
  v1::NodeInfo self;
  {
    absl::MutexLock lock(&self_mu_);
    self_.set_address(address);
    self = self_;
  }
  if (is_coordinator) {
    members_.SetSelf(NodeSpecFromProto(self));
  } else {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(512 << 20);  // a whole plan forwarded for `metactl plan --daemon`
    auto channel = DialDaemon(config_.coordinator, args, security_.as_client);
    coordinator_channel_ = channel;
    coordinator_stub_ = v1::Metad::NewStub(channel);
    coordinator_raw_ = std::make_unique<grpc::GenericStub>(channel);
    served_ranges_ = std::make_unique<ServedRangesCache>(
        [this](const std::string& model) { return FetchServedRanges(model); }, ServedRangesCache::Options{});
  }
  SampleResidentMemory();
  role_.store(is_coordinator ? Role::kCoordinator : Role::kAgent);
}

v1::NodeInfo MetadService::self() const {
  absl::MutexLock lock(&self_mu_);
  return self_;
}

void MetadService::SampleResidentMemory() { resident_bytes_.store(ResidentBytes()); }

void MetadService::ShareRegistry(SharedRegistry registry) {
  registry_.AttachStore(registry.store);
  shared_ = std::move(registry);
}

void MetadService::SyncMembers(const std::vector<v1::NodeInfo>& members) {
  std::vector<NodeSpec> nodes;
  nodes.reserve(members.size());
  for (const v1::NodeInfo& node : members) nodes.push_back(NodeSpecFromProto(node));
  members_.Sync(nodes);
}

absl::Status MetadService::ApplySharedModel(const v1::ModelRecord& record) {
  ML_RETURN_IF_ERROR(CheckModelRecord(record));
  MetaModelSummary summary;
  const bool held_before = meta_->Summarize(record.name(), &summary);
  ML_ASSIGN_OR_RETURN(ModelRecord plain, ModelRecordFromProto(record));
  ML_RETURN_IF_ERROR(registry_.Put(plain, RecordOrigin::kSharedRegistry));
  ML_ASSIGN_OR_RETURN(Skeleton skeleton, ParseSkeletonJson(record.skeleton_json(), record.name()));
  if (absl::Status held = meta_->Put(record.name(), skeleton); !held.ok()) {
    registry_.Drop(record.name());
    return held;
  }
  if (!held_before) {
    LogInfo(absl::StrCat("model ", record.name(), " (registered on ", record.registered_on(), ") read from ",
                         shared_.has_value() ? shared_->describe : "the registry"));
  }
  return absl::OkStatus();
}

void MetadService::DropSharedModel(const std::string& name) {
  if (!registry_.Drop(name)) return;
  meta_->Remove(name);
  LogInfo(absl::StrCat("model ", name, " is gone from the registry: unregistered"));
}

std::vector<std::string> MetadService::ModelNames() const { return registry_.Names(); }

void MetadService::RefreshFromRegistry(const std::string& name) {
  if (!shared_.has_value()) return;
  absl::StatusOr<std::optional<StoredRecord>> stored = shared_->fetch(name);
  if (!stored.ok()) {
    LogWarning(
        absl::StrCat("registry: reading model ", QuoteForMessage(name), ": ", stored.status().message()));
    return;
  }
  if (!stored->has_value()) {
    DropSharedModel(name);
    return;
  }
  if (absl::Status applied = ApplySharedModel((*stored)->record); !applied.ok()) {
    LogError(absl::StrCat("registry: skipped ", (*stored)->origin, ": ", applied.message()));
  }
}

absl::StatusOr<std::shared_ptr<const RegisteredModel>> MetadService::FindModel(const std::string& name) {
  absl::StatusOr<std::shared_ptr<const RegisteredModel>> found = registry_.Find(name);
  if (!absl::IsNotFound(found.status()) || !shared_.has_value()) return found;
  RefreshFromRegistry(name);  // registered on another peer a moment ago?
  return registry_.Find(name);
}

absl::StatusOr<std::shared_ptr<const PlannedModel>> MetadService::Plan(const std::string& model,
                                                                       int world_size,
                                                                       const StrategyOptions& options) {
  ML_ASSIGN_OR_RETURN(std::shared_ptr<const RegisteredModel> found, FindModel(model));
  return plans_.Get(std::move(found), members_.Live(), world_size, options);
}

absl::StatusOr<v1::GetLayoutResponse> MetadService::Layout(const std::string& model) {
  ML_ASSIGN_OR_RETURN(std::shared_ptr<const RegisteredModel> found, FindModel(model));
  const std::vector<NodeSpec> members = members_.Live();
  return LayoutAnswer(found->record, PlanFilesOf(found->record, members), members, members_.LoadsOf(members));
}

absl::Status MetadService::AllowRead(const std::string& model, const std::string& path,
                                     const StridedRuns& runs) {
  if (!is_coordinator()) return served_ranges_->Check(model, path, runs);
  absl::StatusOr<std::shared_ptr<const RegisteredModel>> found = FindModel(model);
  if (!found.ok()) {
    return absl::PermissionDeniedError(
        absl::StrCat("ReadRange: ", QuoteForMessage(path, 512),
                     " is not a file of a registered model: ", found.status().message()));
  }
  return (*found)->served.Check(path, runs);
}

absl::StatusOr<ServedRanges> MetadService::FetchServedRanges(const std::string& model) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::GetLayoutRequest request;
  request.set_model(model);
  v1::GetLayoutResponse layout;
  ML_RETURN_IF_ERROR(
      FromGrpcStatus(coordinator_stub_->GetLayout(&ctx, request, &layout),
                     absl::StrCat("asking coordinator ", config_.coordinator, " for model ", model)));
  // The same tensors and folder the coordinator's own ServedRanges are built from.
  v1::ModelRecord record;
  record.set_name(model);
  record.set_checkpoint_dir(layout.checkpoint_dir());
  *record.mutable_tensors() = std::move(*layout.mutable_tensors());
  ML_ASSIGN_OR_RETURN(Checkpoint checkpoint, CheckpointFromRecord(record));
  return ServedRanges(model, checkpoint);
}

absl::Status MetadService::RefusedByPeer() const {
  return absl::FailedPreconditionError(
      absl::StrCat(config_.node, " has no coordinator: its registry is ", shared_->describe,
                   ", where every daemon is a peer; give the calling node `registry: ", shared_->describe,
                   "` instead of `coordinator:`"));
}

absl::Status MetadService::EarlyRefusal(const grpc::CallbackServerContext& ctx) const {
  if (absl::Status caller = CheckCaller(ctx, security_.token); !caller.ok()) {
    return absl::Status(caller.code(), absl::StrCat(config_.node, ": ", caller.message()));
  }
  if (role_.load() == Role::kStarting) {
    return absl::UnavailableError(absl::StrCat(config_.node, " is starting; try again"));
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* MetadService::RefuseEarly(grpc::CallbackServerContext* ctx) {
  absl::Status refused = EarlyRefusal(*ctx);
  return refused.ok() ? nullptr : FinishNow(ctx, refused);
}

void MetadService::Post(WorkQueue& queue, grpc::ServerUnaryReactor* reactor, std::function<void()> job) {
  if (!queue.Post(std::move(job))) {
    reactor->Finish(ToGrpcStatus(absl::ResourceExhaustedError(absl::StrCat(
        config_.node, ": the ", queue.name(), " queue holds ", queue.queued(), " jobs; try again"))));
  }
}

absl::Status MetadService::JoinCoordinator(absl::Duration timeout, bool leaving) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::JoinRequest request;
  *request.mutable_node() = self();
  request.set_leaving(leaving);
  request.set_read_streams(streams_in_flight_.load());
  v1::JoinResponse response;
  return FromDaemonCallStatus(coordinator_stub_->Join(&ctx, request, &response), *coordinator_channel_,
                              config_.coordinator, absl::StrCat("joining coordinator ", config_.coordinator),
                              &security_.as_client);
}

absl::Status MetadService::RestoreRegistry(RecordStore* store) {
  const absl::Time start = absl::Now();
  absl::StatusOr<StoredModels> stored = store->Load();
  if (!stored.ok()) {
    return absl::Status(stored.status().code(), absl::StrCat("reading the registry in ", store->Describe(),
                                                             ": ", stored.status().message()));
  }
  for (const absl::Status& skipped : stored->skipped) {
    LogError(absl::StrCat("registry: skipped ", skipped.message()));
  }
  int restored = 0;
  for (const StoredRecord& entry : stored->records) {
    const v1::ModelRecord& record = entry.record;
    absl::Status usable = CheckModelRecord(record);
    if (usable.ok() && record.registered_on() == config_.node) usable = CheckRecordFiles(record, config_);
    absl::StatusOr<ModelRecord> plain = usable.ok() ? ModelRecordFromProto(record) : usable;
    if (usable.ok()) usable = plain.status();
    if (usable.ok()) usable = registry_.Put(*plain, RecordOrigin::kRestore);
    if (usable.ok()) {
      absl::StatusOr<Skeleton> skeleton = ParseSkeletonJson(record.skeleton_json(), record.name());
      usable = skeleton.ok() ? meta_->Put(record.name(), *skeleton) : skeleton.status();
      if (!usable.ok()) registry_.Drop(record.name());  // no store attached yet: memory only
    }
    if (!usable.ok()) {
      LogError(absl::StrCat("registry: skipped model ", QuoteForMessage(record.name()), " from ",
                            entry.origin, ": ", usable.message()));
      continue;
    }
    ++restored;
  }
  registry_.AttachStore(store);
  LogInfo(absl::StrCat("registry: restored ", restored, " models from ", store->Describe(), " in ",
                       absl::ToInt64Milliseconds(absl::Now() - start), " ms (",
                       stored->records.size() - restored + stored->skipped.size(), " skipped)"));
  return absl::OkStatus();
}

// On the io queue: reads the checkpoint's headers, then records the model (coordinator) or
// leaves `to_publish` for the caller to send on.
absl::Status MetadService::Register(const v1::RegisterModelRequest& request,
                                    v1::RegisterModelResponse* response, v1::ModelRecord* to_publish,
                                    const grpc::CallbackServerContext& caller) {
  // Digests read the whole checkpoint: stop when the caller has given up (its deadline passed,
  // or it went away: one without a deadline must not keep a worker reading) or the daemon stops.
  const auto should_stop = [this, &caller] {
    return stopping_.load() || std::chrono::system_clock::now() > caller.deadline() || caller.IsCancelled();
  };
  ML_ASSIGN_OR_RETURN(Registration prepared, PrepareRegistration(request, config_, should_stop));
  response->set_name(request.name());
  response->set_tensor_count(static_cast<int64_t>(prepared.skeleton.tensors.size()));
  response->set_total_bytes(prepared.skeleton.total_size_bytes());
  response->set_registered_on(config_.node);
  response->set_coordinator(is_coordinator() ? self().address() : config_.coordinator);
  if (is_coordinator()) {
    // A peer first learns what another peer may have registered under this name, so that a
    // different checkpoint is refused (ALREADY_EXISTS) here as it would be there.
    RefreshFromRegistry(request.name());
    // The registry first: a refused replacement must not leave the new skeleton behind.
    ML_ASSIGN_OR_RETURN(ModelRecord record, ModelRecordFromProto(prepared.record));
    ML_RETURN_IF_ERROR(registry_.Put(record, RecordOrigin::kRegister, request.replace()));
    ML_RETURN_IF_ERROR(meta_->Put(request.name(), prepared.skeleton));
    LogInfo(absl::StrCat("registered ", request.name(), " from ", prepared.record.checkpoint_dir(), ": ",
                         response->tensor_count(), " tensors, ", response->total_bytes(), " bytes"));
    return absl::OkStatus();
  }
  *to_publish = std::move(prepared.record);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* MetadService::RegisterModel(grpc::CallbackServerContext* ctx,
                                                      const v1::RegisterModelRequest* request,
                                                      v1::RegisterModelResponse* response) {
  if (auto* refused = RefuseEarly(ctx)) return refused;
  if (absl::Status valid = CheckRegisterModelRequest(*request); !valid.ok()) return FinishNow(ctx, valid);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // The job finishes the reactor: `ctx` is valid throughout.
  Post(io_, reactor, [this, reactor, ctx, request, response] {
    v1::ModelRecord record;
    absl::Status status = Register(*request, response, &record, *ctx);
    if (!status.ok()) {
      LogWarning(absl::StrCat("RegisterModel ", request->name(), " refused: ", status.message()));
    }
    if (!status.ok() || is_coordinator()) {
      reactor->Finish(ToGrpcStatus(status));
      return;
    }
    // A node agent: publish to the coordinator, then hold the meta tensors too.
    struct Call {
      grpc::ClientContext ctx;
      v1::PublishModelRequest request;
      v1::PublishModelResponse response;
    };
    auto call = std::make_shared<Call>();
    call->ctx.set_deadline(ForwardDeadline(ctx->deadline()));
    *call->request.mutable_model() = std::move(record);
    call->request.set_replace(request->replace());
    coordinator_stub_->async()->PublishModel(
        &call->ctx, &call->request, &call->response, [this, reactor, request, call](grpc::Status status) {
          absl::Status published =
              FromGrpcStatus(status, absl::StrCat("publishing to coordinator ", config_.coordinator));
          if (!published.ok()) {
            reactor->Finish(ToGrpcStatus(published));
            return;
          }
          served_ranges_->Forget(call->request.model().name());  // perhaps re-registered: ask anew
          // Building meta tensors is CPU work: off this callback thread too.
          Post(planning_, reactor, [this, reactor, call] {
            absl::StatusOr<Skeleton> skeleton =
                ParseSkeletonJson(call->request.model().skeleton_json(), call->request.model().name());
            absl::Status held =
                skeleton.ok() ? meta_->Put(call->request.model().name(), *skeleton) : skeleton.status();
            reactor->Finish(ToGrpcStatus(held));
          });
        });
  });
  return reactor;
}

grpc::ServerUnaryReactor* MetadService::UnregisterModel(grpc::CallbackServerContext* ctx,
                                                        const v1::UnregisterModelRequest* request,
                                                        v1::UnregisterModelResponse* response) {
  if (auto* refused = RefuseEarly(ctx)) return refused;
  if (absl::Status valid = CheckName("model name", request->name()); !valid.ok())
    return FinishNow(ctx, valid);
  if (is_coordinator()) {
    // Persisting the removal writes to disk: not on this thread.
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    Post(io_, reactor, [this, reactor, request] {
      RefreshFromRegistry(request->name());  // peers: registered elsewhere a moment ago
      absl::Status removed = registry_.Remove(request->name());
      if (removed.ok()) {
        meta_->Remove(request->name());
        LogInfo(absl::StrCat("unregistered ", request->name()));
      }
      reactor->Finish(ToGrpcStatus(removed));
    });
    return reactor;
  }
  meta_->Remove(request->name());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto client_ctx = std::make_shared<grpc::ClientContext>();
  client_ctx->set_deadline(ForwardDeadline(ctx->deadline()));
  coordinator_stub_->async()->UnregisterModel(
      client_ctx.get(), request, response, [reactor, client_ctx, request, this](grpc::Status status) {
        served_ranges_->Forget(request->name());  // its files are no longer served from here
        reactor->Finish(
            ToGrpcStatus(FromGrpcStatus(status, absl::StrCat("coordinator ", config_.coordinator))));
      });
  return reactor;
}

grpc::ServerUnaryReactor* MetadService::GetPlan(grpc::CallbackServerContext* ctx,
                                                const grpc::ByteBuffer* raw_request,
                                                grpc::ByteBuffer* raw_response) {
  if (auto* refused = RefuseEarly(ctx)) return refused;
  auto request = std::make_shared<v1::GetPlanRequest>();
  if (!ParseByteBuffer(*raw_request, request.get())) {
    return FinishNow(ctx, absl::InvalidArgumentError("GetPlan: the request is not a GetPlanRequest"));
  }
  if (absl::Status valid = CheckGetPlanRequest(*request); !valid.ok()) return FinishNow(ctx, valid);
  if (!is_coordinator()) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    // Forwarded as bytes; the coordinator's answer comes back as bytes, with this node's name
    // appended as answered_by.
    auto client_ctx = std::make_shared<grpc::ClientContext>();
    client_ctx->set_deadline(ForwardDeadline(ctx->deadline()));
    coordinator_raw_->UnaryCall(
        client_ctx.get(), "/metaload.v1.Metad/GetPlan", grpc::StubOptions(), raw_request, raw_response,
        [reactor, raw_response, client_ctx, this](grpc::Status status) {
          if (status.ok()) {
            std::string answered_by;
            AppendLengthDelimitedField(kResponseAnsweredByField, config_.node, &answered_by);
            AppendToByteBuffer(std::move(answered_by), raw_response);
          }
          reactor->Finish(
              ToGrpcStatus(FromGrpcStatus(status, absl::StrCat("coordinator ", config_.coordinator))));
        });
    return reactor;
  }
  absl::StatusOr<StrategyOptions> options = StrategyOptionsFromProto(*request);
  if (!options.ok()) return FinishNow(ctx, options.status());
  // Not the default reactor: this one gives its slot of plan_answers_ back once sent.
  auto* limited = new LimitedReactor(&plan_answers_);
  grpc::ServerUnaryReactor* reactor = limited;
  plan_answers_.Submit(
      [this, reactor, request, raw_response, options = *options] {
        absl::StatusOr<std::shared_ptr<const PlannedModel>> planned =
            Plan(request->model(), request->world_size(), options);
        if (!planned.ok()) {
          reactor->Finish(ToGrpcStatus(planned.status()));
          return;
        }
        std::string bytes;
        if (request->has_rank()) {
          absl::StatusOr<std::string> built =
              RankAnswerBytes((*planned)->plan, (*planned)->tables, request->rank(),
                              members_.LoadsOf((*planned)->members), kServersPerFile);
          if (!built.ok()) {
            reactor->Finish(ToGrpcStatus(built.status()));
            return;
          }
          bytes = *std::move(built);
        } else {
          bytes =
              WholePlanAnswer((*planned)->plan, (*planned)->tables, (*planned)->model->record.skeleton_json)
                  .SerializeAsString();
        }
        AppendLengthDelimitedField(kResponseAnsweredByField, config_.node, &bytes);
        AppendToByteBuffer(std::move(bytes), raw_response);
        reactor->Finish(grpc::Status::OK);
      },
      limited);
  return reactor;
}

grpc::ServerUnaryReactor* MetadService::GetLayout(grpc::CallbackServerContext* ctx,
                                                  const v1::GetLayoutRequest* request,
                                                  v1::GetLayoutResponse* response) {
  if (auto* refused = RefuseEarly(ctx)) return refused;
  if (absl::Status valid = CheckName("model name", request->model()); !valid.ok())
    return FinishNow(ctx, valid);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (!is_coordinator()) {
    auto client_ctx = std::make_shared<grpc::ClientContext>();
    client_ctx->set_deadline(ForwardDeadline(ctx->deadline()));
    coordinator_stub_->async()->GetLayout(
        client_ctx.get(), request, response, [reactor, response, client_ctx, this](grpc::Status status) {
          if (status.ok()) response->set_answered_by(config_.node);
          reactor->Finish(
              ToGrpcStatus(FromGrpcStatus(status, absl::StrCat("coordinator ", config_.coordinator))));
        });
    return reactor;
  }
  // A model of millions of tensors is a large copy: not on this thread.
  Post(planning_, reactor, [this, reactor, request, response] {
    absl::StatusOr<v1::GetLayoutResponse> layout = Layout(request->model());
    if (layout.ok()) {
      *response = *std::move(layout);
      response->set_answered_by(config_.node);
    }
    reactor->Finish(ToGrpcStatus(layout.status()));
  });
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* MetadService::ReadRange(grpc::CallbackServerContext* ctx,
                                                                    const grpc::ByteBuffer* raw_request) {
  if (absl::Status refused = EarlyRefusal(*ctx); !refused.ok()) return new FailedWriter(refused);
  v1::ReadRangeRequest request;
  if (!ParseByteBuffer(*raw_request, &request)) {
    return new FailedWriter(absl::InvalidArgumentError("ReadRange: the request is not a ReadRangeRequest"));
  }
  if (request.path().empty() || request.path().size() > kMaxPathBytes) {
    return new FailedWriter(absl::InvalidArgumentError(absl::StrCat(
        "ReadRange: path ", QuoteForMessage(request.path()), " must have 1 to ", kMaxPathBytes, " bytes")));
  }
  if (absl::Status valid = CheckName("ReadRange: model name", request.model()); !valid.ok()) {
    return new FailedWriter(valid);
  }
  absl::StatusOr<StreamTable::Stream*> admitted = streams_.Admit(ctx);
  if (!admitted.ok()) return new FailedWriter(admitted.status());
  RangeServing serving{&config_.roots, config_.chunk_bytes, &chunk_pool_,  &io_,
                       &bytes_served_, &streams_in_flight_, &chunk_fault_, &streams_};
  serving.allow = [this](const std::string& model, const std::string& path, const StridedRuns& runs) {
    return AllowRead(model, path, runs);
  };
  return new RangeWriter(std::move(request), serving, *admitted);
}

grpc::ServerUnaryReactor* MetadService::GetStatus(grpc::CallbackServerContext* ctx,
                                                  const v1::GetStatusRequest*,
                                                  v1::GetStatusResponse* response) {
  if (auto* refused = RefuseEarly(ctx)) return refused;
  *response->mutable_self() = self();
  response->set_is_coordinator(is_coordinator());
  response->set_coordinator(is_coordinator() ? response->self().address() : config_.coordinator);
  if (shared_.has_value()) response->set_registry(shared_->describe);
  if (is_coordinator()) {
    for (const NodeSpec& node : members_.Live()) *response->add_members() = NodeSpecToProto(node);
    for (const MemberStatus& member : members_.States()) {
      v1::MemberState* out = response->add_member_states();
      *out->mutable_node() = NodeSpecToProto(member.node);
      out->set_state(member.state == MemberStatus::kUp     ? "up"
                     : member.state == MemberStatus::kDown ? "down"
                                                           : "left");
      out->set_last_seen_ms(absl::ToInt64Milliseconds(member.since_seen));
    }
    for (const std::shared_ptr<const RegisteredModel>& model : registry_.Models()) {
      const ModelRecord& record = model->record;
      v1::ModelSummary* summary = response->add_models();
      summary->set_name(record.name);
      summary->set_checkpoint_dir(record.checkpoint.dir);
      summary->set_registered_on(record.registered_on);
      uint64_t total = 0;
      for (const TensorLayout& t : record.checkpoint.tensors) total += t.end_offset - t.begin_offset;
      summary->set_tensor_count(static_cast<int64_t>(record.checkpoint.tensors.size()));
      summary->set_total_bytes(total);
      MetaModelSummary meta;
      if (meta_->Summarize(record.name, &meta)) summary->set_meta_tensor_count(meta.meta_tensor_count);
    }
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
  if (auto* refused = RefuseEarly(ctx)) return refused;
  if (!is_coordinator()) {
    return FinishNow(ctx, absl::FailedPreconditionError(absl::StrCat(
                              config_.node, " is not the coordinator; join ", config_.coordinator)));
  }
  if (shared_.has_value()) return FinishNow(ctx, RefusedByPeer());
  if (absl::Status valid = CheckNodeInfo(request->node()); !valid.ok()) {
    LogWarning(absl::StrCat("Join from ", QuoteForMessage(ctx->peer()), " refused: ", valid.message()));
    return FinishNow(ctx, valid);
  }
  const std::string identity = CallerIdentity(*ctx, !security_.token.empty());
  if (request->leaving()) {
    absl::Status left = members_.Leave(NodeSpecFromProto(request->node()), identity);
    if (left.ok()) {
      LogInfo(absl::StrCat("node ", request->node().name(), " left (it is stopping), from ",
                           QuoteForMessage(ctx->peer()), " as ", identity));
    }
    return FinishNow(ctx, left);
  }
  absl::StatusOr<bool> joined =
      members_.Join(NodeSpecFromProto(request->node()), request->read_streams(), identity);
  if (joined.ok() && *joined) {
    LogInfo(absl::StrCat("node ", request->node().name(), " joined from ", QuoteForMessage(ctx->peer()),
                         " as ", identity, ", serving at ", request->node().address()));
  }
  if (!joined.ok()) {
    LogWarning(absl::StrCat("Join of node ", QuoteForMessage(request->node().name()), " from ",
                            QuoteForMessage(ctx->peer()), " as ", identity,
                            " refused: ", joined.status().message()));
  }
  if (joined.ok()) response->set_coordinator(self().address());
  return FinishNow(ctx, joined.status());
}

grpc::ServerUnaryReactor* MetadService::PublishModel(grpc::CallbackServerContext* ctx,
                                                     const v1::PublishModelRequest* request,
                                                     v1::PublishModelResponse*) {
  if (auto* refused = RefuseEarly(ctx)) return refused;
  if (!is_coordinator()) {
    return FinishNow(ctx,
                     absl::FailedPreconditionError(absl::StrCat(config_.node, " is not the coordinator")));
  }
  if (shared_.has_value()) return FinishNow(ctx, RefusedByPeer());
  if (absl::Status valid = CheckModelRecord(request->model()); !valid.ok()) return FinishNow(ctx, valid);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  Post(planning_, reactor,
       [this, reactor, request, peer = ctx->peer(),
        identity = CallerIdentity(*ctx, !security_.token.empty())] {
         const v1::ModelRecord& record = request->model();
         absl::StatusOr<ModelRecord> plain = ModelRecordFromProto(record);
         absl::Status put =
             plain.ok() ? registry_.Put(*plain, RecordOrigin::kPublish, request->replace()) : plain.status();
         if (put.ok()) {
           auto skeleton = ParseSkeletonJson(record.skeleton_json(), record.name());
           if (skeleton.ok()) put = meta_->Put(record.name(), *skeleton);
           LogInfo(absl::StrCat("model ", record.name(), " published by ", record.registered_on(), " (from ",
                                peer, " as ", identity, ")"));
         }
         reactor->Finish(ToGrpcStatus(put));
       });
  return reactor;
}

}  // namespace metaload
