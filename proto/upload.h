// The client side of an upload: RegisterModel and PublishModel carry their request serialized
// and cut into UploadChunks (metaload.proto says why), the first declaring the whole length.
// The daemon's side is daemon/service/upload_call.h.
//
//   grpc::Status s = RegisterModel(*stub, &ctx, request, &response);     // blocking
//   StartUpload(chunks, [&](auto* r) { stub->async()->PublishModel(&ctx, &resp, r); },
//               [](const grpc::Status& s) { ... });                    // callback, any thread
//
// Thread-safety: the functions are reentrant; one upload's callbacks run one at a time.
#ifndef METALOAD_PROTO_UPLOAD_H_
#define METALOAD_PROTO_UPLOAD_H_

#include <google/protobuf/message_lite.h>
#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "proto/metaload.grpc.pb.h"

namespace metaload {

// The request bytes in one UploadChunk: well under the 128 KiB a daemon takes per message
// (daemon/requests/request_limits.h), with room for the chunk's own fields.
inline constexpr size_t kUploadChunkBytes = 64 << 10;

// `request` serialized and cut into chunks of at most kUploadChunkBytes; the first declares the
// length. A request that serializes to nothing is one chunk declaring 0 (the daemon refuses it).
std::vector<v1::UploadChunk> UploadChunks(const google::protobuf::MessageLite& request);

// RegisterModel and PublishModel as the unary calls they stand for, blocking.
grpc::Status RegisterModel(v1::Metad::StubInterface& stub, grpc::ClientContext* ctx,
                           const v1::RegisterModelRequest& request, v1::RegisterModelResponse* response);
grpc::Status PublishModel(v1::Metad::StubInterface& stub, grpc::ClientContext* ctx,
                          const v1::PublishModelRequest& request, v1::PublishModelResponse* response);

// Sends `chunks` on a client-streaming call that `begin` binds to the reactor it is given
// (stub->async()->PublishModel(&ctx, &response, reactor)), then calls `done` with the call's
// status, once, on a gRPC thread. The context and response that `begin` uses must outlive `done`.
void StartUpload(std::vector<v1::UploadChunk> chunks,
                 const std::function<void(grpc::ClientWriteReactor<v1::UploadChunk>*)>& begin,
                 std::function<void(const grpc::Status&)> done);

}  // namespace metaload

#endif  // METALOAD_PROTO_UPLOAD_H_
