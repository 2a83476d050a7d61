#include "daemon/service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/range_writer.h"
#include "daemon/registrar.h"
#include "planner/file_io.h"
#include "planner/log.h"
#include "planner/proc_memory.h"
#include "planner/status_macros.h"
#include "planner/units.h"
#include "proto/convert.h"

namespace metaload {
namespace {

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// A stream that fails before its first message.
class FailedWriter final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit FailedWriter(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

MetadService::MetadService(NodeConfig config, MetaStore* meta) : config_(std::move(config)), meta_(meta) {
  self_.set_name(config_.node);
  self_.set_address(config_.listen);
  self_.set_gpu_count(config_.gpus);
  self_.set_gpu_memory_bytes(config_.gpu_memory_bytes);
  for (const std::string& root : config_.roots) self_.add_roots(root);
  if (!config_.is_coordinator()) {
    coordinator_stub_ = v1::Metad::NewStub(
        grpc::CreateChannel(config_.coordinator, grpc::InsecureChannelCredentials()));
  }
}

void MetadService::SetBoundAddress(const std::string& address) {
  v1::NodeInfo self;
  {
    absl::MutexLock lock(&self_mu_);
    self_.set_address(address);
    self = self_;
  }
  if (is_coordinator()) {
    absl::Status joined = state_.Join(self);
    if (!joined.ok()) LogError(std::string(joined.message()));
  }
}

v1::NodeInfo MetadService::self() const {
  absl::MutexLock lock(&self_mu_);
  return self_;
}

absl::Status MetadService::JoinCoordinator(absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::JoinRequest request;
  *request.mutable_node() = self();
  v1::JoinResponse response;
  return FromGrpcStatus(coordinator_stub_->Join(&ctx, request, &response),
                        absl::StrCat("joining coordinator ", config_.coordinator));
}

grpc::ServerUnaryReactor* MetadService::RegisterModel(grpc::CallbackServerContext* ctx,
                                                      const v1::RegisterModelRequest* request,
                                                      v1::RegisterModelResponse* response) {
  auto prepared = PrepareRegistration(*request, config_);
  if (!prepared.ok()) {
    LogWarning(absl::StrCat("RegisterModel ", request->name(), " refused: ", prepared.status().message()));
    return FinishNow(ctx, prepared.status());
  }
  absl::Status held = meta_->Put(request->name(), prepared->skeleton);
  if (!held.ok()) return FinishNow(ctx, held);

  response->set_name(request->name());
  response->set_tensor_count(static_cast<int64_t>(prepared->skeleton.tensors.size()));
  response->set_total_bytes(prepared->skeleton.total_size_bytes());
  response->set_registered_on(config_.node);
  response->set_coordinator(is_coordinator() ? self().address() : config_.coordinator);
  LogInfo(absl::StrCat("registered ", request->name(), " from ", prepared->record.checkpoint_dir(), ": ",
                       response->tensor_count(), " tensors, ", response->total_bytes(), " bytes"));

  if (is_coordinator()) return FinishNow(ctx, state_.PutModel(prepared->record));

  // Publish to the coordinator without blocking this thread.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  struct Call {
    grpc::ClientContext ctx;
    v1::PublishModelRequest request;
    v1::PublishModelResponse response;
  };
  auto call = std::make_shared<Call>();
  call->ctx.set_deadline(ctx->deadline());
  *call->request.mutable_model() = std::move(prepared->record);
  coordinator_stub_->async()->PublishModel(
      &call->ctx, &call->request, &call->response, [reactor, call, this](grpc::Status status) {
        reactor->Finish(ToGrpcStatus(
            FromGrpcStatus(status, absl::StrCat("publishing to coordinator ", config_.coordinator))));
      });
  return reactor;
}

grpc::ServerUnaryReactor* MetadService::GetPlan(grpc::CallbackServerContext* ctx, const v1::GetPlanRequest* request,
                                                v1::GetPlanResponse* response) {
  if (request->world_size() < 0 || request->world_size() > 1 << 20) {
    return FinishNow(ctx, absl::InvalidArgumentError(absl::StrCat("bad world size ", request->world_size())));
  }
  if (is_coordinator()) {
    absl::StatusOr<StrategyOptions> options = StrategyOptionsFromProto(*request);
    if (!options.ok()) return FinishNow(ctx, options.status());
    auto plan = state_.MakePlan(request->model(), request->world_size(), *options);
    if (!plan.ok()) return FinishNow(ctx, plan.status());
    *response = std::move(*plan);
    response->set_answered_by(config_.node);
    return FinishNow(ctx, absl::OkStatus());
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto client_ctx = std::make_shared<grpc::ClientContext>();
  client_ctx->set_deadline(ctx->deadline());
  coordinator_stub_->async()->GetPlan(
      client_ctx.get(), request, response, [reactor, response, client_ctx, this](grpc::Status status) {
        if (status.ok()) response->set_answered_by(config_.node);
        reactor->Finish(ToGrpcStatus(FromGrpcStatus(status, absl::StrCat("coordinator ", config_.coordinator))));
      });
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* MetadService::ReadRange(grpc::CallbackServerContext* ctx,
                                                                   const grpc::ByteBuffer* raw_request) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (raw_request->Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  auto request = std::make_unique<v1::ReadRangeRequest>();
  if (!request->ParseFromString(bytes)) {
    return new FailedWriter(absl::InvalidArgumentError("ReadRange: the request is not a ReadRangeRequest"));
  }
  auto path = ResolveUnderRoots(request->path(), config_.roots);
  if (!path.ok()) return new FailedWriter(path.status());
  auto file = ReadOnlyFile::Open(*path);
  if (!file.ok()) return new FailedWriter(file.status());
  absl::StatusOr<StridedRuns> runs = RequestedRuns(*request, *path, file->size_bytes());
  if (!runs.ok()) return new FailedWriter(runs.status());
  uint32_t chunk = request->chunk_bytes() == 0 ? config_.chunk_bytes : request->chunk_bytes();
  chunk = std::clamp<uint32_t>(chunk, 4096, 3u << 20);
  return new RangeWriter(std::move(*file), *runs, chunk, &chunk_pool_, &bytes_served_);
}

grpc::ServerUnaryReactor* MetadService::GetStatus(grpc::CallbackServerContext* ctx, const v1::GetStatusRequest*,
                                                  v1::GetStatusResponse* response) {
  *response->mutable_self() = self();
  response->set_is_coordinator(is_coordinator());
  response->set_coordinator(is_coordinator() ? response->self().address() : config_.coordinator);
  if (is_coordinator()) {
    for (const v1::NodeInfo& node : state_.Members()) *response->add_members() = node;
    for (const v1::ModelRecord& record : state_.Models()) {
      v1::ModelSummary* summary = response->add_models();
      summary->set_name(record.name());
      summary->set_checkpoint_dir(record.checkpoint_dir());
      summary->set_registered_on(record.registered_on());
      uint64_t total = 0;
      for (const v1::TensorLocation& t : record.tensors()) total += t.end_offset() - t.begin_offset();
      summary->set_tensor_count(record.tensors_size());
      summary->set_total_bytes(total);
      MetaModelSummary meta;
      if (meta_->Summarize(record.name(), &meta)) summary->set_meta_tensor_count(meta.meta_tensor_count);
    }
  }
  response->set_resident_bytes(ResidentBytes());
  response->set_bytes_served(bytes_served_.load());
  response->set_uptime_ms(absl::ToInt64Milliseconds(absl::Now() - started_));
  return FinishNow(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* MetadService::Join(grpc::CallbackServerContext* ctx, const v1::JoinRequest* request,
                                             v1::JoinResponse* response) {
  if (!is_coordinator()) {
    return FinishNow(ctx, absl::FailedPreconditionError(absl::StrCat(
                              config_.node, " is not the coordinator; join ", config_.coordinator)));
  }
  absl::Status joined = state_.Join(request->node());
  if (joined.ok()) response->set_coordinator(self().address());
  return FinishNow(ctx, joined);
}

grpc::ServerUnaryReactor* MetadService::PublishModel(grpc::CallbackServerContext* ctx,
                                                     const v1::PublishModelRequest* request,
                                                     v1::PublishModelResponse*) {
  if (!is_coordinator()) {
    return FinishNow(ctx, absl::FailedPreconditionError(absl::StrCat(config_.node, " is not the coordinator")));
  }
  absl::Status put = state_.PutModel(request->model());
  if (put.ok()) {
    auto skeleton = ParseSkeletonJson(request->model().skeleton_json(), request->model().name());
    if (skeleton.ok()) put = meta_->Put(request->model().name(), *skeleton);
    LogInfo(absl::StrCat("model ", request->model().name(), " published by ", request->model().registered_on()));
  }
  return FinishNow(ctx, put);
}

}  // namespace metaload
