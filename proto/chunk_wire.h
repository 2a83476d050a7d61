// ReadRangeChunk on the wire without protobuf's copies. A chunk is almost all payload, and
// with the generated code it is copied twice on each side (file -> std::string -> gRPC
// slice; slice -> std::string -> tensor). Here the daemon preads straight into the slice it
// sends, and the rank copies straight from the received slices into its tensor. The bytes
// are an ordinary serialized ReadRangeChunk, so typed stubs (tests, other clients) read them.
//
// Every chunk carries the CRC-32C of its payload, computed by the daemon from the bytes it read;
// the rank recomputes it over the bytes it received before they count (docs/integrity.md).
//
//   daemon:  grpc::ByteBuffer chunk = EncodeChunk(offset, position, std::move(payload_slice), crc);
//   rank:    ML_ASSIGN_OR_RETURN(ChunkHeader h, DecodeChunkInto(buffer, dest_after_received, check));
#ifndef METALOAD_PROTO_CHUNK_WIRE_H_
#define METALOAD_PROTO_CHUNK_WIRE_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace metaload {

// A serialized ReadRangeChunk{offset, position, crc32c, data = payload}, the payload not
// copied. `crc32c` is Crc32c(payload); absent only when a test's fault drops it
// (daemon/serving/read_range/serving_hooks.h).
grpc::ByteBuffer EncodeChunk(uint64_t offset, uint64_t position, grpc::Slice payload,
                             std::optional<uint32_t> crc32c);

struct ChunkHeader {
  uint64_t offset = 0;
  uint64_t position = 0;
  uint64_t data_bytes = 0;
  bool checksummed = false;  // the chunk carried a CRC-32C, and the data matched it
};

// What the decoder checks, and the names its errors give.
struct ChunkCheck {
  absl::string_view path;    // the file streamed
  absl::string_view server;  // the daemon's address
  // The stream gathers strided runs: a chunk's bytes are not one range of the file.
  bool strided = false;
  // A chunk without a checksum is refused unless false: only a measurement of what checksums
  // cost asks that (tests/bench/stream_bench.cc); every rank refuses it.
  bool require_checksum = true;
};

// Parses a serialized ReadRangeChunk, copies its data into the front of `dest`, and checks
// the data against the chunk's CRC-32C. DataLoss for malformed bytes, data longer than `dest`
// (the wire is untrusted), or data that does not match its checksum: "checksum mismatch in
// <path> at bytes [a, b) from <server>"; FailedPrecondition for a chunk without a checksum (a
// daemon older than this client) when `check.require_checksum`. Every error names the path and
// the server. On any error the bytes written into `dest` must not be used.
absl::StatusOr<ChunkHeader> DecodeChunkInto(const grpc::ByteBuffer& buffer, absl::Span<uint8_t> dest,
                                            const ChunkCheck& check);

}  // namespace metaload

#endif  // METALOAD_PROTO_CHUNK_WIRE_H_
