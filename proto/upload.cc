#include "proto/upload.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

namespace metaload {
namespace {

// Writes each chunk in turn, then half-closes; deletes itself when the call is done.
class UploadWriter final : public grpc::ClientWriteReactor<v1::UploadChunk> {
 public:
  UploadWriter(std::vector<v1::UploadChunk> chunks, std::function<void(const grpc::Status&)> done)
      : chunks_(std::move(chunks)), done_(std::move(done)) {}

  void Go() {
    StartWrite(&chunks_[0]);
    StartCall();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return;                                     // the call failed: OnDone says how
    std::string().swap(*chunks_[next_].mutable_data());  // sent: free it now
    if (++next_ < chunks_.size()) {
      StartWrite(&chunks_[next_]);
    } else {
      StartWritesDone();
    }
  }
  void OnDone(const grpc::Status& status) override {
    done_(status);
    delete this;
  }

 private:
  std::vector<v1::UploadChunk> chunks_;
  size_t next_ = 0;
  const std::function<void(const grpc::Status&)> done_;
};

template <typename Open>
grpc::Status UploadBlocking(const google::protobuf::MessageLite& request, Open open) {
  const std::vector<v1::UploadChunk> chunks = UploadChunks(request);
  std::unique_ptr<grpc::ClientWriterInterface<v1::UploadChunk>> writer = open();
  for (const v1::UploadChunk& chunk : chunks) {
    if (!writer->Write(chunk)) break;  // the call ended: Finish says how
  }
  writer->WritesDone();
  return writer->Finish();
}

}  // namespace

std::vector<v1::UploadChunk> UploadChunks(const google::protobuf::MessageLite& request) {
  const std::string bytes = request.SerializeAsString();
  std::vector<v1::UploadChunk> chunks;
  chunks.reserve(std::max<size_t>(1, (bytes.size() + kUploadChunkBytes - 1) / kUploadChunkBytes));
  for (size_t at = 0; at < bytes.size() || chunks.empty(); at += kUploadChunkBytes) {
    v1::UploadChunk& chunk = chunks.emplace_back();
    if (at == 0) chunk.set_total_bytes(bytes.size());
    chunk.set_data(bytes.substr(at, std::min(kUploadChunkBytes, bytes.size() - at)));
  }
  return chunks;
}

grpc::Status RegisterModel(v1::Metad::StubInterface& stub, grpc::ClientContext* ctx,
                           const v1::RegisterModelRequest& request, v1::RegisterModelResponse* response) {
  return UploadBlocking(request, [&] { return stub.RegisterModel(ctx, response); });
}

grpc::Status PublishModel(v1::Metad::StubInterface& stub, grpc::ClientContext* ctx,
                          const v1::PublishModelRequest& request, v1::PublishModelResponse* response) {
  return UploadBlocking(request, [&] { return stub.PublishModel(ctx, response); });
}

void StartUpload(std::vector<v1::UploadChunk> chunks,
                 const std::function<void(grpc::ClientWriteReactor<v1::UploadChunk>*)>& begin,
                 std::function<void(const grpc::Status&)> done) {
  auto* writer = new UploadWriter(std::move(chunks), std::move(done));
  begin(writer);
  writer->Go();
}

}  // namespace metaload
