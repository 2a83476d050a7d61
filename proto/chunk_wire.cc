#include "proto/chunk_wire.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/hash/crc32c.h"

namespace metaload {
namespace {

// Field numbers of ReadRangeChunk (metaload.proto) and protobuf wire types.
constexpr uint32_t kOffsetField = 1, kDataField = 2, kPositionField = 3, kCrc32cField = 4;
constexpr uint32_t kVarint = 0, kLengthDelimited = 2, kFixed32 = 5;

void PutVarint(uint64_t value, std::vector<uint8_t>* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<uint8_t>(value | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<uint8_t>(value));
}

// Reads across the slices of a ByteBuffer.
class SliceCursor {
 public:
  explicit SliceCursor(const std::vector<grpc::Slice>& slices) : slices_(slices) {}
  bool done() {
    Skip();
    return index_ == slices_.size();
  }
  bool Byte(uint8_t* out) {
    Skip();
    if (index_ == slices_.size()) return false;
    *out = slices_[index_].begin()[at_++];
    return true;
  }
  bool Varint(uint64_t* out) {
    *out = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b = 0;
      if (!Byte(&b)) return false;
      *out |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  bool Fixed32(uint32_t* out) {
    *out = 0;
    for (int i = 0; i < 4; ++i) {
      uint8_t b = 0;
      if (!Byte(&b)) return false;
      *out |= static_cast<uint32_t>(b) << (8 * i);  // little-endian, as protobuf writes it
    }
    return true;
  }
  bool Copy(uint8_t* dest, uint64_t n) {
    while (n > 0) {
      Skip();
      if (index_ == slices_.size()) return false;
      const size_t take = std::min<uint64_t>(n, slices_[index_].size() - at_);
      std::memcpy(dest, slices_[index_].begin() + at_, take);
      dest += take;
      at_ += take;
      n -= take;
    }
    return true;
  }

 private:
  void Skip() {
    while (index_ < slices_.size() && at_ == slices_[index_].size()) {
      ++index_;
      at_ = 0;
    }
  }
  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  size_t at_ = 0;
};

}  // namespace

grpc::ByteBuffer EncodeChunk(uint64_t offset, uint64_t position, grpc::Slice payload,
                             std::optional<uint32_t> crc32c) {
  std::vector<uint8_t> header;
  PutVarint(kOffsetField << 3 | kVarint, &header);
  PutVarint(offset, &header);
  PutVarint(kPositionField << 3 | kVarint, &header);
  PutVarint(position, &header);
  if (crc32c.has_value()) {
    PutVarint(kCrc32cField << 3 | kFixed32, &header);
    for (int i = 0; i < 4; ++i) header.push_back(static_cast<uint8_t>(*crc32c >> (8 * i)));
  }
  PutVarint(kDataField << 3 | kLengthDelimited, &header);
  PutVarint(payload.size(), &header);
  grpc::Slice slices[2] = {grpc::Slice(header.data(), header.size()), std::move(payload)};
  return grpc::ByteBuffer(slices, 2);
}

namespace {

// The fields of a serialized ReadRangeChunk, its data copied into `dest`; DataLoss without
// context for malformed bytes.
absl::StatusOr<ChunkHeader> ParseChunkInto(const grpc::ByteBuffer& buffer, absl::Span<uint8_t> dest,
                                           std::optional<uint32_t>* sent_crc) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return absl::DataLossError("unreadable ReadRange chunk");
  SliceCursor cursor(slices);
  ChunkHeader header;
  bool seen_data = false;
  while (!cursor.done()) {
    uint64_t tag = 0;
    if (!cursor.Varint(&tag)) return absl::DataLossError("truncated ReadRange chunk");
    const uint64_t field = tag >> 3, type = tag & 7;
    if (type == kVarint && (field == kOffsetField || field == kPositionField)) {
      if (!cursor.Varint(field == kOffsetField ? &header.offset : &header.position)) {
        return absl::DataLossError("truncated ReadRange chunk");
      }
    } else if (type == kFixed32 && field == kCrc32cField) {
      uint32_t crc = 0;
      if (!cursor.Fixed32(&crc)) return absl::DataLossError("truncated ReadRange chunk");
      *sent_crc = crc;
    } else if (type == kLengthDelimited && field == kDataField && !seen_data) {
      seen_data = true;
      if (!cursor.Varint(&header.data_bytes)) return absl::DataLossError("truncated ReadRange chunk");
      if (header.data_bytes > dest.size()) {
        return absl::DataLossError(absl::StrCat("a ReadRange chunk of ", header.data_bytes,
                                                " bytes is longer than the ", dest.size(),
                                                " bytes still expected"));
      }
      if (!cursor.Copy(dest.data(), header.data_bytes))
        return absl::DataLossError("truncated ReadRange chunk");
    } else {
      return absl::DataLossError(
          absl::StrCat("unexpected field ", field, " (wire type ", type, ") in a ReadRange chunk"));
    }
  }
  return header;
}

}  // namespace

absl::StatusOr<ChunkHeader> DecodeChunkInto(const grpc::ByteBuffer& buffer, absl::Span<uint8_t> dest,
                                            const ChunkCheck& check) {
  std::optional<uint32_t> sent_crc;
  absl::StatusOr<ChunkHeader> parsed = ParseChunkInto(buffer, dest, &sent_crc);
  if (!parsed.ok()) {
    return absl::DataLossError(
        absl::StrCat(parsed.status().message(), " (streaming ", check.path, " from ", check.server, ")"));
  }
  ChunkHeader header = *parsed;
  if (!sent_crc.has_value()) {
    if (!check.require_checksum) return header;
    return absl::FailedPreconditionError(
        absl::StrCat("a ReadRange chunk of ", check.path, " from ", check.server,
                     " carries no checksum: that daemon is older than this client (metad and the client "
                     "library ship together; upgrade it)"));
  }
  const uint32_t received_crc = Crc32c(absl::MakeConstSpan(dest.data(), header.data_bytes));
  if (received_crc != *sent_crc) {
    // Strided chunks gather runs: their bytes start at `offset` but are not one range.
    const std::string end = check.strided ? absl::StrCat("+", header.data_bytes, " gathered")
                                          : absl::StrCat(header.offset + header.data_bytes);
    return absl::DataLossError(absl::StrFormat(
        "checksum mismatch in %s at bytes [%d, %s) from %s (CRC-32C 0x%08x sent, 0x%08x received)",
        check.path, header.offset, end, check.server, *sent_crc, received_crc));
  }
  header.checksummed = true;
  return header;
}

}  // namespace metaload
