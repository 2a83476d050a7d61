// Where one tensor of a checkpoint lives: its file and absolute byte range there.
#ifndef METALOAD_PLANNER_FORMAT_TENSOR_LAYOUT_H_
#define METALOAD_PLANNER_FORMAT_TENSOR_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "planner/format/dtype.h"
#include "util/hash/tile_digest.h"

namespace metaload {

// A tensor's content digest as registered (util/hash/tile_digest.h, docs/integrity.md): the
// lane-wise sum of the terms of its tiles, which the ranks holding any split of it check together.
struct TensorDigest {
  DigestKind kind = DigestKind::kNone;
  uint64_t tile_bytes = 0;  // TileGridFor(kind, shape, element size): checked where records are read
  std::string lanes;        // LaneCount(kind) lanes, 2 bytes each, little-endian (LanesToBytes)

  bool operator==(const TensorDigest& other) const {
    return kind == other.kind && tile_bytes == other.tile_bytes && lanes == other.lanes;
  }
  bool operator!=(const TensorDigest& other) const { return !(*this == other); }
};

struct TensorLayout {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  // File name relative to the checkpoint folder ("model-00001-of-00004.safetensors").
  std::string file;
  // Absolute byte offsets in `file`: [begin_offset, end_offset).
  uint64_t begin_offset = 0;
  uint64_t end_offset = 0;
  // Recorded at registration (`metactl register`, `metactl digest`); absent: none.
  std::optional<TensorDigest> digest;
  // Its place in the checkpoint's tensor list (Checkpoint::tensors, sorted by file and offset):
  // the slot the ranks' proofs of it are summed in when they verify. -1: not known.
  int64_t index = -1;

  uint64_t size_bytes() const { return end_offset - begin_offset; }
};

// Product of dims; 1 for a scalar. REQUIRES: TensorBytesFit(shape, ...) (validated at the edge).
int64_t NumElements(const std::vector<int64_t>& shape);
// The one check of a shape from outside (a skeleton, a config, a registration): sets `bytes` to
// the size of a `dtype` tensor of `shape` and returns true, or false when a dimension is negative
// or the size is 2^63 bytes or more. Then the element count fits NumElements' int64 and sizes
// can be summed as uint64 with AddOverflows.
bool TensorBytesFit(absl::Span<const int64_t> shape, DType dtype, uint64_t* bytes);
// "[4096, 11008]"
std::string ShapeToString(const std::vector<int64_t>& shape);
// The one check of a digest from outside (a record, a plan item, a manifest): a known kind,
// LaneCount(kind) lanes and the tile size TileGridFor gives for this tensor, so that every
// rank cuts its bytes as the registration did. InvalidArgument naming what is off. REQUIRES:
// the shape passed TensorBytesFit.
absl::Status CheckTensorDigest(const TensorDigest& digest, const std::vector<int64_t>& shape, DType dtype);

}  // namespace metaload

#endif  // METALOAD_PLANNER_FORMAT_TENSOR_LAYOUT_H_
