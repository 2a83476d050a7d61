// Content digests that can check any part of a tensor (docs/integrity.md, "tile digests").
//
// A tensor's stored bytes are cut into tiles of `tile_bytes` (TileGridFor: whole elements, never
// across a row of its last dimension, so that the row and column splits of FSDP, tensor
// parallelism and _StridedShard keep tiles whole). Each tile k gives a term T(k, bytes), a vector
// of 16-bit lanes, and the tensor's digest is the lane-wise sum of all its terms, mod 2^16:
//
//   fast   (kFast):   4 lanes, the XXH3-64 of the tile seeded with k. Against corruption: any
//                     change of a tile changes its term but with odds of 2^-64. Not against a
//                     sender that chooses its bytes (XXH3 is not a cryptographic hash).
//   strong (kStrong): 1024 lanes, the AES-128-CTR key stream (key and IV: SHA-256 of a domain
//                     tag, k and the tile) read as 16-bit lanes: LtHash (Bellare-Micciancio;
//                     Lewi et al., "Securing Update Propagation with Homomorphic Hashing",
//                     2019, lthash16 with n = 1024): finding other bytes with the same sum
//                     means a lattice short-vector problem, however the bytes are chosen.
//
// Because the digest is a sum, every rank adds the terms of the tiles it holds and one
// all-reduce gives the whole tensor's, over any split: the holders of R copies sum to R times
// the digest. A tile a rank holds only part of is counted as cut, never guessed.
//
//   const TileGrid grid = TileGridFor(DigestKind::kFast, {4096, 4096}, 2);
//   TileProof proof(DigestKind::kFast, grid, box_runs);   // what this rank will hold
//   proof.Add(offset_in_tensor, bytes);                    // as pieces arrive, any order
//   TensorProofSum sum = proof.Finish();                   // lanes, tiles hashed, tiles cut
//
// Thread-safety: the free functions are; a TileProof may be added to from several threads.
#ifndef METALOAD_UTIL_HASH_TILE_DIGEST_H_
#define METALOAD_UTIL_HASH_TILE_DIGEST_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "util/strided_runs.h"

namespace metaload {

enum class DigestKind : uint8_t { kNone = 0, kFast = 1, kStrong = 2 };

// "fast", "strong" ("none" for kNone): the words of flags, records and reports.
const char* DigestKindName(DigestKind kind);
// "fast" | "strong"; InvalidArgument naming both otherwise.
absl::StatusOr<DigestKind> ParseDigestKind(absl::string_view text);
// 4 or 1024 (0 for kNone).
size_t LaneCount(DigestKind kind);

struct TileGrid {
  uint64_t tile_bytes = 0;  // 0 only for a tensor of no bytes
  uint64_t tile_count = 0;
};

// The tiles of a tensor of `shape` whose elements take `element_bytes` (>= 1): a tile is g
// elements of one row of the last dimension, g the largest power of two that divides that
// dimension, leaves at least kColumnSplits(kind) tiles per row (so that a split of the last
// dimension into that many equal parts, or any divisor of it, cuts no tile) and is at most
// kMaxTileBytes(kind). A 1-D tensor is a column (one element a tile: a split at any index cuts
// none); a scalar one tile. REQUIRES: the shape's byte size fits uint64 (TensorBytesFit).
TileGrid TileGridFor(DigestKind kind, const std::vector<int64_t>& shape, uint64_t element_bytes);

// Lanes as stored in a record: 2 bytes each, little-endian.
std::string LanesToBytes(const std::vector<uint16_t>& lanes);
// Empty when `bytes` is not LaneCount(kind) lanes.
std::vector<uint16_t> LanesFromBytes(DigestKind kind, absl::string_view bytes);
// `lanes` times `times`, lane-wise, mod 2^16.
std::vector<uint16_t> ScaleLanes(const std::vector<uint16_t>& lanes, uint64_t times);
// "0x1a2b3c4d5e6f7081" (fast) / "sha256:9f86d0…" of the lanes (strong): for messages.
std::string LanesForMessage(DigestKind kind, const std::vector<uint16_t>& lanes);

// Adds the terms of consecutive whole tiles to `lanes` (LaneCount(kind) long): `bytes` holds
// tiles first_index, first_index + 1, ... each `tile_bytes` long. REQUIRES: bytes.size() a
// multiple of tile_bytes > 0.
void AddTileTerms(DigestKind kind, uint64_t first_index, uint64_t tile_bytes, absl::Span<const uint8_t> bytes,
                  std::vector<uint16_t>& lanes);

// The digest of a whole tensor's stored bytes (registration, `metactl digest`).
std::vector<uint16_t> DigestOf(DigestKind kind, const TileGrid& grid, absl::Span<const uint8_t> bytes);

// What one rank proved of one tensor.
struct TensorProofSum {
  DigestKind kind = DigestKind::kNone;
  std::vector<uint16_t> lanes;  // the sum of the terms of the tiles hashed
  uint64_t tiles_hashed = 0;    // tiles held whole here, each hashed once
  uint64_t tiles_cut = 0;       // tiles held only in part here: not hashed
};

// The terms of the tiles one rank holds of one tensor, from its bytes as they arrive.
class TileProof {
 public:
  // `held`: the stored bytes this rank will hold, as offsets from the tensor's first byte (the
  // box's runs, client/read/fill.h). Tiles it holds only in part are counted cut at once; a
  // whole one whose bytes arrive in several pieces is hashed when its last part arrives.
  TileProof(DigestKind kind, TileGrid grid, const std::vector<StridedRuns>& held);

  // Bytes [offset, offset + bytes.size()) of the tensor's stored bytes, each delivered once.
  void Add(uint64_t offset, absl::Span<const uint8_t> bytes);
  // Every run of `runs` (offsets from the tensor's first byte) laid end to end in `bytes`.
  void AddRuns(const StridedRuns& runs, absl::Span<const uint8_t> bytes);
  // What was proved; a whole tile some of whose bytes never arrived counts as cut.
  TensorProofSum Finish();

 private:
  bool Whole(uint64_t tile) const;  // held whole by this rank

  const DigestKind kind_;
  const TileGrid grid_;
  std::vector<StridedRuns> held_;
  uint64_t cut_ = 0;  // held in part: fixed at construction
  std::mutex mu_;
  std::vector<uint16_t> lanes_;  // guarded by mu_
  uint64_t hashed_ = 0;          // guarded by mu_
  struct Fragment {
    std::vector<uint8_t> bytes;
    uint64_t filled = 0;
  };
  std::map<uint64_t, Fragment> fragments_;  // guarded by mu_: whole tiles that arrived in parts
};

}  // namespace metaload

#endif  // METALOAD_UTIL_HASH_TILE_DIGEST_H_
