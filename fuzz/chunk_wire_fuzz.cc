// DecodeChunkInto (a ReadRange chunk as the rank receives it from another daemon) on arbitrary
// bytes. gRPC hands the rank a buffer of one or more slices, and the decoder walks fields across
// slice boundaries: the first input byte chooses how the rest is cut into up to four slices.
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "proto/chunk_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t cuts = data[0];
  ++data;
  --size;
  std::vector<grpc::Slice> slices;
  size_t begin = 0;
  for (int i = 0; i < 3 && begin < size; ++i) {
    // Two bits per cut: a slice of 1, 2, 7 or 64 bytes, then the rest.
    static constexpr size_t kLengths[] = {1, 2, 7, 64};
    const size_t length = std::min(kLengths[(cuts >> (2 * i)) & 3], size - begin);
    slices.emplace_back(data + begin, length);
    begin += length;
  }
  if (begin < size || slices.empty()) slices.emplace_back(data + begin, size - begin);
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  std::vector<uint8_t> dest(4096);
  metaload::ChunkCheck check;
  check.path = "fuzz.safetensors";
  check.server = "fuzz:7070";
  (void)metaload::DecodeChunkInto(buffer, absl::MakeSpan(dest), check);
  check.require_checksum = false;
  (void)metaload::DecodeChunkInto(buffer, absl::MakeSpan(dest), check);
  return 0;
}
