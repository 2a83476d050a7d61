#include "daemon/service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
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
class FailedWriter final : public grpc::ServerWriteReactor<v1::ReadRangeChunk> {
 public:
  explicit FailedWriter(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

// Streams the runs of one file (one contiguous range, or a slice's strided runs) end to end in
// chunks. One chunk is in flight at a time;
// the next is read when gRPC has taken the previous one, so a slow client slows the reads
// (flow control) instead of growing the daemon's memory. Cancellation surfaces as a failed
// write, which ends the stream.
class RangeWriter final : public grpc::ServerWriteReactor<v1::ReadRangeChunk> {
 public:
  // REQUIRES: `runs` lie inside the file (checked at the edge, ReadRange).
  RangeWriter(ReadOnlyFile file, const StridedRuns& runs, uint32_t chunk_bytes, std::atomic<uint64_t>* bytes_served)
      : file_(std::move(file)), runs_(runs), length_(runs.total_bytes()), chunk_bytes_(chunk_bytes),
        bytes_served_(bytes_served) {
    if (runs_.run_count > 0) {
      file_.WillNeed(runs_.first_offset, (runs_.run_count - 1) * runs_.stride_bytes + runs_.run_bytes);
    }
    WriteNext();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the reader went away"));
      return;
    }
    WriteNext();
  }
  void OnDone() override { delete this; }

 private:
  void WriteNext() {
    if (sent_ == length_) {
      Finish(grpc::Status::OK);
      return;
    }
    size_t n = static_cast<size_t>(std::min<uint64_t>(chunk_bytes_, length_ - sent_));
    std::string* data = chunk_.mutable_data();
    data->resize(n);
    absl::Status read = file_.ReadRuns(runs_, sent_, absl::MakeSpan(reinterpret_cast<uint8_t*>(data->data()), n));
    if (!read.ok()) {
      LogWarning(absl::StrCat("ReadRange: ", read.message()));
      Finish(ToGrpcStatus(read));
      return;
    }
    chunk_.set_offset(runs_.first_offset + (sent_ / runs_.run_bytes) * runs_.stride_bytes + sent_ % runs_.run_bytes);
    chunk_.set_position(sent_);
    sent_ += n;
    bytes_served_->fetch_add(n, std::memory_order_relaxed);
    StartWrite(&chunk_);
  }

  ReadOnlyFile file_;
  const StridedRuns runs_;
  const uint64_t length_;
  const uint32_t chunk_bytes_;
  std::atomic<uint64_t>* const bytes_served_;
  uint64_t sent_ = 0;
  v1::ReadRangeChunk chunk_;
};

// The runs a ReadRange asks for, validated against the file: the request is untrusted, so
// every product and sum is checked before a byte is read.
absl::StatusOr<StridedRuns> RequestedRuns(const v1::ReadRangeRequest& request, const std::string& path,
                                          uint64_t file_size_bytes) {
  StridedRuns runs;
  runs.first_offset = request.offset();
  if (request.run_bytes() == 0) {
    runs.run_bytes = runs.stride_bytes = request.length();
    runs.run_count = request.length() == 0 ? 0 : 1;
  } else {
    if (request.stride_bytes() < request.run_bytes() || request.length() % request.run_bytes() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "strided read of ", path, ": length ", request.length(), " must be a multiple of run_bytes ",
          request.run_bytes(), ", and stride_bytes ", request.stride_bytes(), " at least run_bytes"));
    }
    runs.run_bytes = request.run_bytes();
    runs.stride_bytes = request.stride_bytes();
    runs.run_count = request.length() / request.run_bytes();
  }
  uint64_t span = 0, end = 0;
  if (runs.run_count > 0 &&
      (MulOverflows(runs.run_count - 1, runs.stride_bytes, &span) ||
       AddOverflows(span, runs.run_bytes, &span) || AddOverflows(runs.first_offset, span, &end) ||
       end > file_size_bytes)) {
    return absl::OutOfRangeError(absl::StrCat("range [", request.offset(), ", +", request.length(),
                                              request.run_bytes() == 0 ? "" : " strided",
                                              ") passes the end of ", path, " (", file_size_bytes, " bytes)"));
  }
  return runs;
}

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

grpc::ServerWriteReactor<v1::ReadRangeChunk>* MetadService::ReadRange(grpc::CallbackServerContext* ctx,
                                                                      const v1::ReadRangeRequest* request) {
  auto path = ResolveUnderRoots(request->path(), config_.roots);
  if (!path.ok()) return new FailedWriter(path.status());
  auto file = ReadOnlyFile::Open(*path);
  if (!file.ok()) return new FailedWriter(file.status());
  absl::StatusOr<StridedRuns> runs = RequestedRuns(*request, *path, file->size_bytes());
  if (!runs.ok()) return new FailedWriter(runs.status());
  uint32_t chunk = request->chunk_bytes() == 0 ? config_.chunk_bytes : request->chunk_bytes();
  chunk = std::clamp<uint32_t>(chunk, 4096, 3u << 20);
  return new RangeWriter(std::move(*file), *runs, chunk, &bytes_served_);
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
