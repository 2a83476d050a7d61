// One unary RPC as MetadService and its backend (backend.h) answer it: what the caller allows
// (its deadline, whether it went away) and one Finish with an absl::Status. The service gives
// a call the last touch its answer needs on success (an answer's answered_by); a backend may
// hang a hook on the call's end (a slot given back once the answer is sent).
//
//   UnaryCall* call = UnaryCall::Start(ctx, [response] { response->set_answered_by("a"); });
//   backend.Layout(request, response, call);   // finishes the call, on any thread
//   return call->reactor();
//
// A client-streaming upload (upload_call.h) is answered through a UnaryCall too, once its
// request has arrived whole: backends never see the difference.
//
// Thread-safety: Finish may be called from any thread, exactly once; gRPC may delete the call
// as soon as it is finished, so nothing of it may be touched after Finish.
#ifndef METALOAD_DAEMON_SERVICE_UNARY_CALL_H_
#define METALOAD_DAEMON_SERVICE_UNARY_CALL_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "daemon/exec/work_queue.h"

namespace metaload {

class UnaryCall {
 public:
  // A call of `ctx`, which must be the handler's. `on_ok` runs just before an OK status is sent.
  static UnaryCall* Start(grpc::CallbackServerContext* ctx, std::function<void()> on_ok = {});

  // What the handler returns to gRPC. REQUIRES: made by Start.
  grpc::ServerUnaryReactor* reactor();
  // Sends `status` (after on_ok when it is OK). Exactly once, from any thread.
  void Finish(const absl::Status& status);
  // Runs `hook` once gRPC is done with the call: its answer sent, failed or cancelled.
  // REQUIRES: before Finish; at most one hook.
  void WhenDone(std::function<void()> hook) { done_ = std::move(hook); }

  const grpc::CallbackServerContext& context() const { return *ctx_; }
  std::chrono::system_clock::time_point deadline() const { return ctx_->deadline(); }

 private:
  class Reactor;
  friend class UploadCall;
  // `finish` sends the status; `unary` is the reactor when the call is unary, else null.
  UnaryCall(grpc::CallbackServerContext* ctx, std::function<void()> on_ok,
            std::function<void(const grpc::Status&)> finish, grpc::ServerUnaryReactor* unary)
      : ctx_(ctx), on_ok_(std::move(on_ok)), finish_(std::move(finish)), unary_(unary) {}
  // From the reactor's OnDone.
  void Done() {
    if (done_) done_();
  }

  grpc::CallbackServerContext* const ctx_;
  const std::function<void()> on_ok_;
  const std::function<void(const grpc::Status&)> finish_;
  grpc::ServerUnaryReactor* const unary_;
  std::function<void()> done_;
};

// Runs `job` on `queue`, or finishes `call` with RESOURCE_EXHAUSTED naming `node` and the queue
// when it is full (try again later).
void PostOrRefuse(WorkQueue& queue, const std::string& node, UnaryCall* call, std::function<void()> job);

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVICE_UNARY_CALL_H_
