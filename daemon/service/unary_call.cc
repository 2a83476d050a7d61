#include "daemon/service/unary_call.h"

#include "absl/strings/str_cat.h"
#include "proto/convert.h"

namespace metaload {

// The reactor gRPC holds; the call lives inside it and goes with it.
class UnaryCall::Reactor final : public grpc::ServerUnaryReactor {
 public:
  Reactor(grpc::CallbackServerContext* ctx, std::function<void()> on_ok)
      : call(
            ctx, std::move(on_ok), [this](const grpc::Status& status) { Finish(status); }, this) {}
  void OnDone() override {
    call.Done();
    delete this;
  }

  UnaryCall call;
};

UnaryCall* UnaryCall::Start(grpc::CallbackServerContext* ctx, std::function<void()> on_ok) {
  return &(new Reactor(ctx, std::move(on_ok)))->call;
}

grpc::ServerUnaryReactor* UnaryCall::reactor() { return unary_; }

void UnaryCall::Finish(const absl::Status& status) {
  if (status.ok() && on_ok_) on_ok_();
  finish_(ToGrpcStatus(status));
}

void PostOrRefuse(WorkQueue& queue, const std::string& node, UnaryCall* call, std::function<void()> job) {
  if (!queue.Post(std::move(job))) {
    call->Finish(absl::ResourceExhaustedError(
        absl::StrCat(node, ": the ", queue.name(), " queue holds ", queue.queued(), " jobs; try again")));
  }
}

}  // namespace metaload
