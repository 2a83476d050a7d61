#include "proto/raw_message.h"

#include <grpcpp/support/slice.h>

#include <vector>

namespace metaload {

bool ParseByteBuffer(const grpc::ByteBuffer& buffer, google::protobuf::Message* message) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return false;
  std::string bytes;
  for (const grpc::Slice& slice : slices)
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  return message->ParseFromString(bytes);
}

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

}  // namespace metaload
