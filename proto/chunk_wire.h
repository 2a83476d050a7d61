// ReadRangeChunk on the wire without protobuf's copies. A chunk is almost all payload, and
// with the generated code it is copied twice on each side (file -> std::string -> gRPC
// slice; slice -> std::string -> tensor). Here the daemon preads straight into the slice it
// sends, and the rank copies straight from the received slices into its tensor. The bytes
// are an ordinary serialized ReadRangeChunk, so typed stubs (tests, other clients) read them.
//
//   daemon:  grpc::ByteBuffer chunk = EncodeChunk(offset, position, std::move(payload_slice));
//   rank:    ML_ASSIGN_OR_RETURN(ChunkHeader h, DecodeChunkInto(buffer, dest_after_received));
#ifndef METALOAD_PROTO_CHUNK_WIRE_H_
#define METALOAD_PROTO_CHUNK_WIRE_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace metaload {

// A serialized ReadRangeChunk{offset, position, data = payload}, the payload not copied.
grpc::ByteBuffer EncodeChunk(uint64_t offset, uint64_t position, grpc::Slice payload);

struct ChunkHeader {
  uint64_t offset = 0;
  uint64_t position = 0;
  uint64_t data_bytes = 0;
};

// Parses a serialized ReadRangeChunk and copies its data into the front of `dest`.
// DataLoss for malformed bytes or data longer than `dest` (the wire is untrusted).
absl::StatusOr<ChunkHeader> DecodeChunkInto(const grpc::ByteBuffer& buffer, absl::Span<uint8_t> dest);

}  // namespace metaload

#endif  // METALOAD_PROTO_CHUNK_WIRE_H_
