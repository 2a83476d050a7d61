// The hand-written ReadRangeChunk codec against protobuf's own: what the daemon encodes the
// generated code parses, and what the generated code serializes (fields in number order,
// data before position) the rank decodes; malformed bytes are DataLoss, never a crash; data
// that does not match its CRC-32C is DataLoss naming the file, the bytes and the server.
#include "proto/chunk_wire.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "proto/metaload.pb.h"
#include "util/hash/crc32c.h"

namespace metaload {
namespace {

grpc::ByteBuffer BufferOf(const std::string& bytes, size_t split) {
  // Two slices, cut at `split`, so decoding must cross a slice boundary.
  grpc::Slice parts[2] = {grpc::Slice(bytes.data(), split),
                          grpc::Slice(bytes.data() + split, bytes.size() - split)};
  return grpc::ByteBuffer(parts, 2);
}

uint32_t CrcOf(const std::string& s) {
  return Crc32c(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

const ChunkCheck kCheck{"/ckpt/model.safetensors", "10.0.0.7:7070"};

std::string BytesOf(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

TEST(ChunkWire, EncodedChunkParsesAsAReadRangeChunk) {
  const std::string payload(300000, 'x');
  grpc::ByteBuffer buffer = EncodeChunk(1234567890123ull, 42, grpc::Slice(payload), 0xDEADBEEF);
  v1::ReadRangeChunk chunk;
  ASSERT_TRUE(chunk.ParseFromString(BytesOf(buffer)));
  EXPECT_EQ(chunk.offset(), 1234567890123ull);
  EXPECT_EQ(chunk.position(), 42u);
  EXPECT_EQ(chunk.data(), payload);
  ASSERT_TRUE(chunk.has_crc32c());
  EXPECT_EQ(chunk.crc32c(), 0xDEADBEEFu);
}

TEST(ChunkWire, DecodesWhatProtobufSerializesAcrossSlices) {
  v1::ReadRangeChunk chunk;
  chunk.set_offset(7);
  chunk.set_position(1 << 20);
  chunk.set_data(std::string("abcdefghij"));
  chunk.set_crc32c(CrcOf("abcdefghij"));
  const std::string bytes = chunk.SerializeAsString();
  for (size_t split = 1; split < bytes.size(); ++split) {
    std::string dest(16, '.');
    absl::StatusOr<ChunkHeader> header = DecodeChunkInto(
        BufferOf(bytes, split), absl::MakeSpan(reinterpret_cast<uint8_t*>(dest.data()), dest.size()), kCheck);
    ASSERT_TRUE(header.ok()) << header.status();
    EXPECT_TRUE(header->checksummed);
    EXPECT_EQ(header->offset, 7u);
    EXPECT_EQ(header->position, 1u << 20);
    EXPECT_EQ(header->data_bytes, 10u);
    EXPECT_EQ(dest, "abcdefghij......");
  }
}

TEST(ChunkWire, DataLongerThanExpectedIsDataLoss) {
  grpc::ByteBuffer buffer =
      EncodeChunk(0, 0, grpc::Slice(std::string(100, 'y')), CrcOf(std::string(100, 'y')));
  uint8_t dest[99];
  absl::StatusOr<ChunkHeader> header = DecodeChunkInto(buffer, absl::MakeSpan(dest), kCheck);
  ASSERT_FALSE(header.ok());
  EXPECT_EQ(header.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(header.status().message().find("of 100 bytes is longer than the 99 bytes"),
            absl::string_view::npos);
}

TEST(ChunkWire, TruncatedAndUnknownFieldsAreDataLoss) {
  const std::string bytes =
      BytesOf(EncodeChunk(5, 6, grpc::Slice(std::string(50, 'z')), CrcOf(std::string(50, 'z'))));
  uint8_t dest[64];
  // Header: 08 05 | 18 06 | 25 crc×4 | 12 32 | 50 bytes. A cut between whole fields before the
  // checksum is a chunk without one (refused: FailedPrecondition); after it, a chunk whose
  // missing data does not match it; any other cut is DataLoss.
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    grpc::Slice part(bytes.data(), cut);
    absl::StatusOr<ChunkHeader> header =
        DecodeChunkInto(grpc::ByteBuffer(&part, 1), absl::MakeSpan(dest), kCheck);
    if (cut == 2 || cut == 4) {
      EXPECT_EQ(header.status().code(), absl::StatusCode::kFailedPrecondition) << "cut at " << cut;
    } else {
      EXPECT_EQ(header.status().code(), absl::StatusCode::kDataLoss) << "cut at " << cut;
    }
  }
  grpc::Slice unknown(std::string("\x20\x01", 2));  // field 4, varint
  absl::StatusOr<ChunkHeader> header =
      DecodeChunkInto(grpc::ByteBuffer(&unknown, 1), absl::MakeSpan(dest), kCheck);
  EXPECT_EQ(header.status().code(), absl::StatusCode::kDataLoss);
}

TEST(ChunkWire, AFlippedByteIsAChecksumMismatchNamingFileBytesAndServer) {
  std::string payload(4096, 'q');
  const uint32_t crc = CrcOf(payload);
  payload[100] ^= 0x01;  // after the checksum was computed, as METALOAD_TEST_CORRUPT_CHUNKS does
  grpc::ByteBuffer buffer = EncodeChunk(1000, 0, grpc::Slice(payload), crc);
  std::vector<uint8_t> dest(4096);
  absl::StatusOr<ChunkHeader> header = DecodeChunkInto(buffer, absl::MakeSpan(dest), kCheck);
  ASSERT_FALSE(header.ok());
  EXPECT_EQ(header.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(
      header.status().message(),
      absl::StrFormat("checksum mismatch in /ckpt/model.safetensors at bytes [1000, 5096) from 10.0.0.7:7070 "
                      "(CRC-32C 0x%08x sent, 0x%08x received)",
                      crc, CrcOf(payload)));
}

TEST(ChunkWire, AWrongChecksumOnAStridedChunkSaysItsBytesWereGathered) {
  const std::string payload(64, 'r');
  grpc::ByteBuffer buffer = EncodeChunk(512, 0, grpc::Slice(payload), CrcOf(payload) ^ 1);
  std::vector<uint8_t> dest(64);
  ChunkCheck strided = kCheck;
  strided.strided = true;
  absl::StatusOr<ChunkHeader> header = DecodeChunkInto(buffer, absl::MakeSpan(dest), strided);
  ASSERT_EQ(header.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(header.status().message().find("at bytes [512, +64 gathered) from 10.0.0.7:7070"),
            absl::string_view::npos)
      << header.status();
}

TEST(ChunkWire, AChunkWithoutChecksumIsRefusedUnlessChecksumsAreOff) {
  grpc::ByteBuffer buffer = EncodeChunk(0, 0, grpc::Slice(std::string(10, 's')), std::nullopt);
  std::vector<uint8_t> dest(10);
  absl::StatusOr<ChunkHeader> header = DecodeChunkInto(buffer, absl::MakeSpan(dest), kCheck);
  ASSERT_EQ(header.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(header.status().message().find("from 10.0.0.7:7070 carries no checksum"), absl::string_view::npos)
      << header.status();
  ChunkCheck unchecked = kCheck;
  unchecked.require_checksum = false;
  header = DecodeChunkInto(buffer, absl::MakeSpan(dest), unchecked);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_FALSE(header->checksummed);
  EXPECT_EQ(header->data_bytes, 10u);
}

}  // namespace
}  // namespace metaload
