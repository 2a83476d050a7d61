#include "planner/format/tensor_layout.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/units.h"

namespace metaload {

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool TensorBytesFit(absl::Span<const int64_t> shape, DType dtype, uint64_t* bytes) {
  uint64_t size = static_cast<uint64_t>(DTypeSizeBytes(dtype));
  for (int64_t d : shape) {
    if (d < 0 || MulOverflows(size, static_cast<uint64_t>(d), &size) ||
        size > static_cast<uint64_t>(INT64_MAX)) {
      return false;
    }
  }
  *bytes = size;
  return true;
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::Status CheckTensorDigest(const TensorDigest& digest, const std::vector<int64_t>& shape, DType dtype) {
  if (digest.kind == DigestKind::kNone) return absl::InvalidArgumentError("digest of no known kind");
  if (digest.lanes.size() != 2 * LaneCount(digest.kind)) {
    return absl::InvalidArgumentError(absl::StrCat("a ", DigestKindName(digest.kind), " digest holds ",
                                                   2 * LaneCount(digest.kind), " bytes, not ",
                                                   digest.lanes.size()));
  }
  const TileGrid grid = TileGridFor(digest.kind, shape, static_cast<uint64_t>(DTypeSizeBytes(dtype)));
  if (digest.tile_bytes != grid.tile_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "digest tiles of ", digest.tile_bytes, " bytes; a ", DigestKindName(digest.kind), " digest of ",
        DTypeCode(dtype), " ", ShapeToString(shape), " has tiles of ", grid.tile_bytes));
  }
  return absl::OkStatus();
}

}  // namespace metaload
