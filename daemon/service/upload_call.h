// One client-streaming upload as MetadService answers it: RegisterModel and PublishModel carry
// their request serialized in UploadChunks (proto/upload.h), so that no other call needs more
// than the 128 KiB a daemon takes per message (issue 23: reads need kilobytes). The pieces are
// read one at a time and gathered; each is checked against what the first declared, and the
// whole request must fit max_request_size and what every upload in flight may hold together
// (UploadBudget), else the call ends before another piece is read. Once the sender half-closes
// with the request whole, it is parsed on a work queue and handed on, there, with a UnaryCall to
// finish, as a unary handler gets it.
//
//   if (!allowed) return UploadCall::Refuse(status);
//   return UploadCall::Start<v1::RegisterModelRequest>(ctx, limits,
//       [](const v1::RegisterModelRequest& request, UnaryCall* call) { ... call->Finish(s); });
//
// An upload counts in its own StreamTable (admission per client, and cancelled when its sender
// has left it waiting idle_stream_timeout, or past UploadDeadline); what it holds counts in the
// budget until gRPC is done with it.
//
// Thread-safety: gRPC runs a call's reactions one at a time; the budget is locked.
#ifndef METALOAD_DAEMON_SERVICE_UPLOAD_CALL_H_
#define METALOAD_DAEMON_SERVICE_UPLOAD_CALL_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/exec/work_queue.h"
#include "daemon/service/unary_call.h"
#include "daemon/serving/read_range/stream_table.h"
#include "proto/metaload.grpc.pb.h"

namespace metaload {

// The bytes uploads in flight hold, from their first piece until gRPC is done with the call.
class UploadBudget {
 public:
  explicit UploadBudget(uint64_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}
  // Counts `bytes` more; false (and nothing counted) when that would pass the capacity.
  bool Take(uint64_t bytes);
  void Give(uint64_t bytes);
  uint64_t held_bytes() const;
  uint64_t capacity_bytes() const { return capacity_bytes_; }

 private:
  const uint64_t capacity_bytes_;
  mutable absl::Mutex mu_;
  uint64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

struct UploadLimits {
  std::string node;            // this daemon's name, for messages
  const char* method = "";     // "RegisterModel", for messages
  uint64_t max_request_bytes;  // max_request_size: the largest whole request
  UploadBudget* budget;        // shared by every upload
  StreamTable* uploads;        // shared by every upload
  WorkQueue* parsing;          // where a whole request is parsed and handed on
  // Whom the upload counts against in `uploads` (StreamTable::Admit): the caller's identity
  // where it names one holder; "" for its host.
  std::string client;
  absl::Duration idle_timeout;  // idle_stream_timeout: the grace of the upload's deadline
};

// When an upload of `bytes` admitted at `admitted` must be whole: idle_timeout plus `bytes` at
// kMinUploadBytesPerSecond.
absl::Time UploadDeadline(absl::Time admitted, uint64_t bytes, absl::Duration idle_timeout);

class UploadCall final : public grpc::ServerReadReactor<v1::UploadChunk> {
 public:
  using Reactor = grpc::ServerReadReactor<v1::UploadChunk>;

  // Reads the upload of `ctx` (the handler's), then calls `arrived` with the request, on a job of
  // `limits.parsing`; it must finish the call (any thread, once). The request lives until gRPC is done with
  // the call. REQUIRES: the caller is allowed to make it (its token and role were checked).
  template <typename Request>
  static Reactor* Start(grpc::CallbackServerContext* ctx, UploadLimits limits,
                        std::function<void(const Request&, UnaryCall*)> arrived) {
    auto request = std::make_unique<Request>();
    Request* parsed = request.get();
    return Admit(ctx, std::move(limits), std::move(request),
                 [parsed, arrived = std::move(arrived)](UnaryCall* call) { arrived(*parsed, call); });
  }
  // A call that ends with `status` before anything of it is read.
  static Reactor* Refuse(const absl::Status& status);

  void OnReadDone(bool ok) override;
  void OnDone() override;

 private:
  static Reactor* Admit(grpc::CallbackServerContext* ctx, UploadLimits limits,
                        std::unique_ptr<google::protobuf::MessageLite> request,
                        std::function<void(UnaryCall*)> arrived);
  UploadCall(grpc::CallbackServerContext* ctx, UploadLimits limits, StreamTable::Stream* stream,
             std::unique_ptr<google::protobuf::MessageLite> request, std::function<void(UnaryCall*)> arrived);
  // The first refusal of `piece_`, given what arrived so far; OK takes it.
  absl::Status Take();
  // Ends the call with `refused`, naming this daemon and the method.
  void Fail(const absl::Status& refused);
  void ReadNext();
  // The sender half-closed: the request is whole, or the call ends saying how much is missing.
  void Arrived();

  grpc::CallbackServerContext* const ctx_;
  const UploadLimits limits_;
  StreamTable::Stream* const stream_;
  std::unique_ptr<google::protobuf::MessageLite> request_;
  const std::function<void(UnaryCall*)> arrived_;
  UnaryCall call_;
  v1::UploadChunk piece_;
  std::string bytes_;         // the request so far
  uint64_t total_bytes_ = 0;  // as the first piece declared
  uint64_t held_bytes_ = 0;   // counted in the budget
  uint64_t pieces_ = 0;
  uint64_t last_piece_bytes_ = 0;
  const absl::Time admitted_ = absl::Now();
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVICE_UPLOAD_CALL_H_
