// The hand-written ReadRangeChunk codec against protobuf's own: what the daemon encodes the
// generated code parses, and what the generated code serializes (fields in number order,
// data before position) the rank decodes; malformed bytes are DataLoss, never a crash.
#include "proto/chunk_wire.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "proto/metaload.pb.h"

namespace metaload {
namespace {

grpc::ByteBuffer BufferOf(const std::string& bytes, size_t split) {
  // Two slices, cut at `split`, so decoding must cross a slice boundary.
  grpc::Slice parts[2] = {grpc::Slice(bytes.data(), split), grpc::Slice(bytes.data() + split, bytes.size() - split)};
  return grpc::ByteBuffer(parts, 2);
}

std::string BytesOf(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

TEST(ChunkWire, EncodedChunkParsesAsAReadRangeChunk) {
  const std::string payload(300000, 'x');
  grpc::ByteBuffer buffer = EncodeChunk(1234567890123ull, 42, grpc::Slice(payload));
  v1::ReadRangeChunk chunk;
  ASSERT_TRUE(chunk.ParseFromString(BytesOf(buffer)));
  EXPECT_EQ(chunk.offset(), 1234567890123ull);
  EXPECT_EQ(chunk.position(), 42u);
  EXPECT_EQ(chunk.data(), payload);
}

TEST(ChunkWire, DecodesWhatProtobufSerializesAcrossSlices) {
  v1::ReadRangeChunk chunk;
  chunk.set_offset(7);
  chunk.set_position(1 << 20);
  chunk.set_data(std::string("abcdefghij"));
  const std::string bytes = chunk.SerializeAsString();
  for (size_t split = 1; split < bytes.size(); ++split) {
    std::string dest(16, '.');
    absl::StatusOr<ChunkHeader> header =
        DecodeChunkInto(BufferOf(bytes, split), absl::MakeSpan(reinterpret_cast<uint8_t*>(dest.data()), dest.size()));
    ASSERT_TRUE(header.ok()) << header.status();
    EXPECT_EQ(header->offset, 7u);
    EXPECT_EQ(header->position, 1u << 20);
    EXPECT_EQ(header->data_bytes, 10u);
    EXPECT_EQ(dest, "abcdefghij......");
  }
}

TEST(ChunkWire, DataLongerThanExpectedIsDataLoss) {
  grpc::ByteBuffer buffer = EncodeChunk(0, 0, grpc::Slice(std::string(100, 'y')));
  uint8_t dest[99];
  absl::StatusOr<ChunkHeader> header = DecodeChunkInto(buffer, absl::MakeSpan(dest));
  ASSERT_FALSE(header.ok());
  EXPECT_EQ(header.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(header.status().message().find("of 100 bytes is longer than the 99 bytes"), absl::string_view::npos);
}

TEST(ChunkWire, TruncatedAndUnknownFieldsAreDataLoss) {
  const std::string bytes = BytesOf(EncodeChunk(5, 6, grpc::Slice(std::string(50, 'z'))));
  uint8_t dest[64];
  // Header: 08 05 | 18 06 | 12 32 | 50 bytes. A cut between whole fields is a valid chunk
  // without data (the reader's byte count catches it); any other cut is DataLoss.
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    grpc::Slice part(bytes.data(), cut);
    absl::StatusOr<ChunkHeader> header = DecodeChunkInto(grpc::ByteBuffer(&part, 1), absl::MakeSpan(dest));
    if (cut == 2 || cut == 4) {
      ASSERT_TRUE(header.ok()) << header.status();
      EXPECT_EQ(header->data_bytes, 0u);
    } else {
      EXPECT_EQ(header.status().code(), absl::StatusCode::kDataLoss) << "cut at " << cut;
    }
  }
  grpc::Slice unknown(std::string("\x20\x01", 2));  // field 4, varint
  absl::StatusOr<ChunkHeader> header = DecodeChunkInto(grpc::ByteBuffer(&unknown, 1), absl::MakeSpan(dest));
  EXPECT_EQ(header.status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace metaload
