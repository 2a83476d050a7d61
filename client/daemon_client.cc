#include "client/daemon_client.h"

#include <cstring>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "planner/status_macros.h"
#include "proto/convert.h"
#include "proto/metaload.grpc.pb.h"

namespace metaload {

// Chunks are ~1 MiB; allow up to 16 MiB so a daemon configured with larger chunks (or a
// future one) never trips gRPC's 4 MiB default receive limit.
constexpr int kMaxReceiveBytes = 16 << 20;

struct DaemonClient::Impl {
  std::unique_ptr<v1::Metad::Stub> stub;
};

DaemonClient::DaemonClient(const std::string& address) : address_(address), impl_(std::make_unique<Impl>()) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
  impl_->stub = v1::Metad::NewStub(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

DaemonClient::~DaemonClient() = default;

absl::StatusOr<Assignment> DaemonClient::GetPlan(const std::string& model, int world_size,
                                                 const StrategyOptions& options, absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::GetPlanRequest request;
  request.set_model(model);
  request.set_world_size(world_size);
  StrategyOptionsToProto(options, &request);
  v1::GetPlanResponse response;
  ML_RETURN_IF_ERROR(
      FromGrpcStatus(impl_->stub->GetPlan(&ctx, request, &response), absl::StrCat("GetPlan from ", address_)));

  Assignment out;
  ML_ASSIGN_OR_RETURN(out.plan, PlanFromProto(response.plan()));
  out.answered_by = response.answered_by();
  out.skeleton_json = response.skeleton_json();
  for (const v1::FileSource& f : response.files()) {
    FileRoute route{f.file(), f.path(), f.size_bytes(), {}};
    for (const v1::Endpoint& e : f.servers()) route.servers.push_back({e.node(), e.address()});
    out.files[f.file()] = std::move(route);
  }
  return out;
}

absl::Status DaemonClient::ReadRange(const std::string& path, uint64_t offset, absl::Span<uint8_t> dest,
                                     absl::Duration timeout) {
  return ReadRuns(path, StridedRuns{offset, dest.size(), dest.size(), dest.empty() ? 0u : 1u}, 0, dest, timeout);
}

absl::Status DaemonClient::ReadRuns(const std::string& path, const StridedRuns& runs, uint64_t first_run,
                                    absl::Span<uint8_t> dest, absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::ReadRangeRequest request;
  request.set_path(path);
  request.set_offset(runs.first_offset + first_run * runs.stride_bytes);
  request.set_length(dest.size());
  if (runs.run_count > 1) {
    request.set_run_bytes(runs.run_bytes);
    request.set_stride_bytes(runs.stride_bytes);
  }
  std::unique_ptr<grpc::ClientReader<v1::ReadRangeChunk>> reader = impl_->stub->ReadRange(&ctx, request);
  v1::ReadRangeChunk chunk;
  uint64_t received = 0;
  auto context = [&] {
    return absl::StrCat("streaming ", path, " [", request.offset(), ", +", dest.size(),
                        runs.run_count > 1 ? absl::StrCat(" in runs of ", runs.run_bytes, " every ", runs.stride_bytes)
                                           : std::string(),
                        ") from ", address_);
  };
  while (reader->Read(&chunk)) {
    if (chunk.position() != received || chunk.data().size() > dest.size() - received) {
      ctx.TryCancel();
      reader->Finish();
      return absl::DataLossError(absl::StrCat(context(), ": chunk at position ", chunk.position(), " of ",
                                              chunk.data().size(), " bytes does not follow the ", received,
                                              " bytes received"));
    }
    std::memcpy(dest.data() + received, chunk.data().data(), chunk.data().size());
    received += chunk.data().size();
  }
  ML_RETURN_IF_ERROR(FromGrpcStatus(reader->Finish(), context()));
  if (received != dest.size()) {
    return absl::DataLossError(absl::StrCat(context(), ": stream ended after ", received, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace metaload
