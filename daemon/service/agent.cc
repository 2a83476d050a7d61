#include "daemon/service/agent.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/convert.h"
#include "proto/upload.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// A call a node agent forwards to the coordinator ends by its caller's deadline, and at the
// latest after this: a caller that set none must not pin the call, and its reactor, forever on
// a coordinator that never answers.
constexpr absl::Duration kMaxForwardedCall = absl::Minutes(5);

std::chrono::system_clock::time_point ForwardDeadline(std::chrono::system_clock::time_point caller) {
  return std::min(caller, absl::ToChronoTime(absl::Now() + kMaxForwardedCall));
}

std::shared_ptr<grpc::Channel> DialCoordinator(const BackendContext& context, const ClientCredentials& as) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(512 << 20);  // a whole plan forwarded for `metactl plan --daemon`
  return DialDaemon(context.config->coordinator, args, as);
}

}  // namespace

struct Agent::Publication {
  UnaryCall* call = nullptr;
  grpc::ClientContext ctx;
  v1::PublishModelRequest request;
  v1::PublishModelResponse response;
};

Agent::Agent(BackendContext context)
    : context_(std::move(context)),
      channel_(DialCoordinator(context_, context_.security->as_client)),
      stub_(v1::Metad::NewStub(channel_)),
      raw_(channel_),
      admin_stub_(context_.security->as_admin.token == context_.security->as_client.token
                      ? v1::Metad::NewStub(channel_)
                      : v1::Metad::NewStub(DialCoordinator(context_, context_.security->as_admin))),
      served_ranges_([this](const std::string& model) { return FetchServedRanges(model); },
                     ServedRangesCache::Options{}) {}

absl::Status Agent::Forwarded(const grpc::Status& status) const {
  return FromGrpcStatus(status, absl::StrCat("coordinator ", context_.config->coordinator));
}

void Agent::Record(Registration prepared, bool replace, UnaryCall* call) {
  auto publication = std::make_shared<Publication>();
  publication->call = call;
  publication->ctx.set_deadline(ForwardDeadline(call->deadline()));
  *publication->request.mutable_model() = std::move(prepared.record);
  publication->request.set_replace(replace);
  Publication* p = publication.get();
  v1::Metad::Stub* stub = (replace ? admin_stub_ : stub_).get();
  StartUpload(
      UploadChunks(p->request),
      [stub, p](grpc::ClientWriteReactor<v1::UploadChunk>* upload) {
        stub->async()->PublishModel(&p->ctx, &p->response, upload);
      },
      [this, publication = std::move(publication)](const grpc::Status& status) {
        OnPublished(publication, status);
      });
}

void Agent::OnPublished(std::shared_ptr<Publication> publication, const grpc::Status& status) {
  absl::Status published =
      FromGrpcStatus(status, absl::StrCat("publishing to coordinator ", context_.config->coordinator));
  if (!published.ok()) {
    publication->call->Finish(published);
    return;
  }
  served_ranges_.Forget(publication->request.model().name());  // perhaps re-registered: ask anew
  UnaryCall* call = publication->call;
  PostOrRefuse(*context_.planning, context_.config->node, call,
               [this, publication = std::move(publication)] { HoldMetaTensors(*publication); });
}

void Agent::HoldMetaTensors(const Publication& publication) {
  const v1::ModelRecord& model = publication.request.model();
  publication.call->Finish(context_.meta->PutJson(model.name(), model.skeleton_json()));
}

void Agent::Unregister(const v1::UnregisterModelRequest* request, v1::UnregisterModelResponse* response,
                       UnaryCall* call) {
  context_.meta->Remove(request->name());
  auto ctx = std::make_shared<grpc::ClientContext>();
  ctx->set_deadline(ForwardDeadline(call->deadline()));
  admin_stub_->async()->UnregisterModel(
      ctx.get(), request, response, [this, ctx, request, call](grpc::Status status) {
        served_ranges_.Forget(request->name());  // its files are no longer served from here
        call->Finish(Forwarded(status));
      });
}

void Agent::Plan(const grpc::ByteBuffer* raw_request, std::shared_ptr<const v1::GetPlanRequest>,
                 grpc::ByteBuffer* raw_response, UnaryCall* call) {
  // Forwarded as bytes; the coordinator's answer comes back as bytes (the service appends this
  // node's name as answered_by).
  auto ctx = std::make_shared<grpc::ClientContext>();
  ctx->set_deadline(ForwardDeadline(call->deadline()));
  raw_.UnaryCall(ctx.get(), "/metaload.v1.Metad/GetPlan", grpc::StubOptions(), raw_request, raw_response,
                 [this, ctx, call](grpc::Status status) { call->Finish(Forwarded(status)); });
}

void Agent::Layout(const v1::GetLayoutRequest* request, v1::GetLayoutResponse* response, UnaryCall* call) {
  auto ctx = std::make_shared<grpc::ClientContext>();
  ctx->set_deadline(ForwardDeadline(call->deadline()));
  stub_->async()->GetLayout(ctx.get(), request, response,
                            [this, ctx, call](grpc::Status status) { call->Finish(Forwarded(status)); });
}

absl::StatusOr<OpenedFileCheck> Agent::AllowRead(const std::string& model, const std::string& path,
                                                 const StridedRuns& runs) {
  ML_ASSIGN_OR_RETURN(std::shared_ptr<const ServedRanges> served, served_ranges_.Check(model, path, runs));
  return OpenedFileCheck([served = std::move(served), path](const RandomAccessFile& opened) {
    return served->CheckOpened(path, opened);
  });
}

absl::StatusOr<ServedRanges> Agent::FetchServedRanges(const std::string& model) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::GetLayoutRequest request;
  request.set_model(model);
  v1::GetLayoutResponse layout;
  ML_RETURN_IF_ERROR(FromGrpcStatus(
      stub_->GetLayout(&ctx, request, &layout),
      absl::StrCat("asking coordinator ", context_.config->coordinator, " for model ", model)));
  // The same tensors and folder the coordinator's own ServedRanges are built from; checked
  // against the files here before a byte is served (the coordinator may hold a forged record,
  // and the files are read here).
  v1::ModelRecord record;
  record.set_name(model);
  record.set_checkpoint_dir(layout.checkpoint_dir());
  *record.mutable_tensors() = std::move(*layout.mutable_tensors());
  ML_ASSIGN_OR_RETURN(Checkpoint checkpoint, CheckpointFromRecord(record));
  // Registered here: its files as this host stamped them, which a file served must still be (a
  // coordinator that lied about them could only make this agent refuse more).
  HostStamps registered;
  if (layout.registered_on() == context_.config->node) {
    for (const v1::FileStat& stat : layout.file_stats()) registered[stat.file()] = FileStampFromProto(stat);
  }
  return ServedRanges(model, std::make_shared<const Checkpoint>(std::move(checkpoint)),
                      absl::StrCat("coordinator ", context_.config->coordinator, " (GetLayout)"),
                      std::move(registered));
}

absl::Status Agent::Takes(MemberCall call) const {
  const NodeConfig& config = *context_.config;
  if (call == MemberCall::kJoin) {
    return absl::FailedPreconditionError(
        absl::StrCat(config.node, " is not the coordinator; join ", config.coordinator));
  }
  return absl::FailedPreconditionError(absl::StrCat(config.node, " is not the coordinator"));
}

absl::Status Agent::Join(const NodeSpec&, bool, uint32_t, const Caller&) { return Takes(MemberCall::kJoin); }

absl::Status Agent::Release(const std::string&, const Caller&) { return Takes(MemberCall::kJoin); }

void Agent::Publish(const v1::PublishModelRequest*, const Caller&, UnaryCall* call) {
  call->Finish(Takes(MemberCall::kPublishModel));
}

absl::Status Agent::JoinCoordinator(absl::Duration timeout, bool leaving) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::JoinRequest request;
  *request.mutable_node() = NodeSpecToProto(context_.self);
  request.set_leaving(leaving);
  request.set_read_streams(context_.read_streams());
  v1::JoinResponse response;
  const std::string& coordinator = context_.config->coordinator;
  absl::Status joined =
      FromDaemonCallStatus(stub_->Join(&ctx, request, &response), *channel_, coordinator,
                           absl::StrCat("joining coordinator ", coordinator), &context_.security->as_client);
  if (!leaving) joined_at_ns_.store(joined.ok() ? absl::ToUnixNanos(absl::Now()) : 0);
  return joined;
}

Agent::JoinState Agent::LastJoin(absl::Duration within) const {
  const int64_t joined_at_ns = joined_at_ns_.load();
  if (joined_at_ns == 0) return JoinState::kFailed;
  return absl::Now() - absl::FromUnixNanos(joined_at_ns) < within ? JoinState::kJoined : JoinState::kStale;
}

}  // namespace metaload
