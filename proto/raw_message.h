// Messages as the raw grpc::ByteBuffer a raw callback method receives and sends (GetPlan and
// ReadRange are served raw: metad's service in daemon/service/metad_service.h): parsed into a
// message, and bytes appended without a copy (proto/plan_wire.h says why appending a field to a
// serialized message is sound).
//
//   v1::GetPlanRequest request;
//   if (!ParseByteBuffer(*raw_request, &request)) ...;
//   AppendToByteBuffer(std::move(answer_bytes), raw_response);
//
// Pure functions; safe from any thread on distinct buffers.
#ifndef METALOAD_PROTO_RAW_MESSAGE_H_
#define METALOAD_PROTO_RAW_MESSAGE_H_

#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>

#include <string>

namespace metaload {

// The message a raw request holds; false when it is not one.
bool ParseByteBuffer(const grpc::ByteBuffer& buffer, google::protobuf::Message* message);

// `buffer` followed by `bytes`, which it takes over without a copy (the slices already there
// are shared, not copied either).
void AppendToByteBuffer(std::string bytes, grpc::ByteBuffer* buffer);

}  // namespace metaload

#endif  // METALOAD_PROTO_RAW_MESSAGE_H_
