#include "util/hash/tile_digest.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/hash/sha256.h"
#include "util/hash/xxh3.h"

namespace metaload {
namespace {

// A split of the last dimension into this many equal parts (or any divisor of it) cuts no
// tile; tiles stay below the byte bound, where a term's fixed cost is small against its bytes.
// The strong kind pays ~1.3 us a term (SHA-256 and 2 KiB of AES key stream; 1 KiB tiles run at
// ~0.75 GB/s a core, 4 KiB at ~1.4): it keeps tiles larger and proves splits up to 8-way.
uint64_t ColumnSplits(DigestKind kind) { return kind == DigestKind::kStrong ? 8 : 64; }
uint64_t MaxTileBytes(DigestKind kind) { return kind == DigestKind::kStrong ? 16384 : 4096; }

constexpr size_t kStrongLanes = 1024;
constexpr size_t kFastLanes = 4;
constexpr char kDomain[] = "metaload tile digest v1";

// OpenSSL's contexts, made once per thread and reused for every tile (a context per tile costs
// more than hashing a 1 KiB tile).
struct StrongContexts {
  StrongContexts()
      : md(EVP_MD_CTX_new()),
        cipher(EVP_CIPHER_CTX_new()),
        sha256(EVP_MD_fetch(nullptr, "SHA256", nullptr)),
        aes(EVP_CIPHER_fetch(nullptr, "AES-128-CTR", nullptr)) {}
  ~StrongContexts() {
    EVP_MD_CTX_free(md);
    EVP_CIPHER_CTX_free(cipher);
    EVP_MD_free(sha256);
    EVP_CIPHER_free(aes);
  }
  EVP_MD_CTX* md;
  EVP_CIPHER_CTX* cipher;
  EVP_MD* sha256;
  EVP_CIPHER* aes;
};

void PutLe64(uint64_t v, uint8_t* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

// The strong term of tile `index`: key and IV from SHA-256(domain, index, tile_bytes, tile), its
// AES-128-CTR key stream (the encryption of zeros) as 1024 little-endian 16-bit lanes.
void AddStrongTerm(uint64_t index, absl::Span<const uint8_t> tile, std::vector<uint16_t>& lanes) {
  thread_local StrongContexts c;
  static const uint8_t kZeros[2 * kStrongLanes] = {};
  uint8_t prefix[16];
  PutLe64(index, prefix);
  PutLe64(tile.size(), prefix + 8);
  uint8_t md[32];
  unsigned int md_len = 0;
  // OpenSSL fails here only without memory or the algorithms themselves: no tile can be proven
  // then, and a wrong sum would fail verification, never pass it; abort rather than guess.
  if (EVP_DigestInit_ex(c.md, c.sha256, nullptr) != 1 ||
      EVP_DigestUpdate(c.md, kDomain, sizeof(kDomain)) != 1 ||
      EVP_DigestUpdate(c.md, prefix, sizeof(prefix)) != 1 ||
      EVP_DigestUpdate(c.md, tile.data(), tile.size()) != 1 || EVP_DigestFinal_ex(c.md, md, &md_len) != 1 ||
      md_len != 32) {
    std::abort();
  }
  uint8_t stream[2 * kStrongLanes];
  int out_len = 0;
  if (EVP_EncryptInit_ex(c.cipher, c.aes, nullptr, md, md + 16) != 1 ||
      EVP_EncryptUpdate(c.cipher, stream, &out_len, kZeros, sizeof(kZeros)) != 1 ||
      out_len != sizeof(stream)) {
    std::abort();
  }
  for (size_t l = 0; l < kStrongLanes; ++l) {
    lanes[l] = static_cast<uint16_t>(lanes[l] + (stream[2 * l] | (stream[2 * l + 1] << 8)));
  }
}

void AddFastTerm(uint64_t index, absl::Span<const uint8_t> tile, std::vector<uint16_t>& lanes) {
  const uint64_t h = Xxh3Seeded(tile, index);
  for (size_t l = 0; l < kFastLanes; ++l) lanes[l] = static_cast<uint16_t>(lanes[l] + (h >> (16 * l)));
}

// [begin, end) of tile units overlapping / contained in bytes [from, to).
uint64_t FloorDiv(uint64_t a, uint64_t b) { return a / b; }
uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// Tiles touched and tiles held whole by one contiguous range [from, to) (to > from).
void CountRange(uint64_t from, uint64_t to, uint64_t tile_bytes, uint64_t* touched, uint64_t* whole) {
  *touched = CeilDiv(to, tile_bytes) - FloorDiv(from, tile_bytes);
  const uint64_t first_whole = CeilDiv(from, tile_bytes), end_whole = FloorDiv(to, tile_bytes);
  *whole = end_whole > first_whole ? end_whole - first_whole : 0;
}

// One run per contiguous stretch: a series whose runs follow each other is one run.
StridedRuns Normalized(const StridedRuns& r) {
  if (r.run_count > 1 && r.stride_bytes == r.run_bytes)
    return {r.first_offset, r.run_bytes * r.run_count, 0, 1};
  return r;
}

// Each kind's word and lane count, by its wire value; a value past the table reads as kNone.
struct KindTraits {
  const char* name;
  size_t lanes;
};
constexpr KindTraits kKindTraits[] = {{"none", 0}, {"fast", kFastLanes}, {"strong", kStrongLanes}};

const KindTraits& TraitsOf(DigestKind kind) {
  const size_t i = static_cast<size_t>(kind);
  return kKindTraits[i < std::size(kKindTraits) ? i : 0];
}

}  // namespace

const char* DigestKindName(DigestKind kind) { return TraitsOf(kind).name; }

absl::StatusOr<DigestKind> ParseDigestKind(absl::string_view text) {
  if (text == "fast") return DigestKind::kFast;
  if (text == "strong") return DigestKind::kStrong;
  return absl::InvalidArgumentError(absl::StrCat(
      "digest kind \"", text.substr(0, 64),
      "\": fast (XXH3 tiles: catches corruption) or strong (SHA-256 LtHash: no sender can forge it)"));
}

size_t LaneCount(DigestKind kind) { return TraitsOf(kind).lanes; }

TileGrid TileGridFor(DigestKind kind, const std::vector<int64_t>& shape, uint64_t element_bytes) {
  uint64_t elements = 1;
  for (int64_t d : shape) elements *= static_cast<uint64_t>(d);
  if (elements == 0 || element_bytes == 0) return {};
  if (shape.size() < 2) return {element_bytes, elements};  // a scalar, or a column of single elements
  const uint64_t columns = static_cast<uint64_t>(shape.back());
  uint64_t g = 1;
  while (columns % (2 * g) == 0 && 2 * g * ColumnSplits(kind) <= columns &&
         2 * g * element_bytes <= MaxTileBytes(kind)) {
    g *= 2;
  }
  return {g * element_bytes, elements / g};
}

std::string LanesToBytes(const std::vector<uint16_t>& lanes) {
  std::string out(2 * lanes.size(), '\0');
  for (size_t l = 0; l < lanes.size(); ++l) {
    out[2 * l] = static_cast<char>(lanes[l] & 0xff);
    out[2 * l + 1] = static_cast<char>(lanes[l] >> 8);
  }
  return out;
}

std::vector<uint16_t> LanesFromBytes(DigestKind kind, absl::string_view bytes) {
  const size_t n = LaneCount(kind);
  if (n == 0 || bytes.size() != 2 * n) return {};
  std::vector<uint16_t> lanes(n);
  for (size_t l = 0; l < n; ++l) {
    lanes[l] = static_cast<uint16_t>(static_cast<uint8_t>(bytes[2 * l]) |
                                     (static_cast<uint8_t>(bytes[2 * l + 1]) << 8));
  }
  return lanes;
}

std::vector<uint16_t> ScaleLanes(const std::vector<uint16_t>& lanes, uint64_t times) {
  std::vector<uint16_t> out(lanes.size());
  const uint64_t factor = times & 0xffff;  // mod 2^16 throughout
  for (size_t l = 0; l < lanes.size(); ++l) out[l] = static_cast<uint16_t>(lanes[l] * factor);
  return out;
}

std::string LanesForMessage(DigestKind kind, const std::vector<uint16_t>& lanes) {
  const std::string bytes = LanesToBytes(lanes);
  if (kind == DigestKind::kFast && lanes.size() == kFastLanes) {
    uint64_t v = 0;
    for (size_t l = 0; l < kFastLanes; ++l) v |= static_cast<uint64_t>(lanes[l]) << (16 * l);
    return absl::StrFormat("0x%016x", v);
  }
  return absl::StrCat(
      "sha256:", Sha256Hex(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()))
                     .substr(0, 16));
}

void AddTileTerms(DigestKind kind, uint64_t first_index, uint64_t tile_bytes, absl::Span<const uint8_t> bytes,
                  std::vector<uint16_t>& lanes) {
  const uint64_t tiles = bytes.size() / tile_bytes;
  for (uint64_t t = 0; t < tiles; ++t) {
    const absl::Span<const uint8_t> tile = bytes.subspan(t * tile_bytes, tile_bytes);
    if (kind == DigestKind::kStrong) {
      AddStrongTerm(first_index + t, tile, lanes);
    } else {
      AddFastTerm(first_index + t, tile, lanes);
    }
  }
}

std::vector<uint16_t> DigestOf(DigestKind kind, const TileGrid& grid, absl::Span<const uint8_t> bytes) {
  std::vector<uint16_t> lanes(LaneCount(kind), 0);
  if (grid.tile_bytes > 0) AddTileTerms(kind, 0, grid.tile_bytes, bytes, lanes);
  return lanes;
}

TileProof::TileProof(DigestKind kind, TileGrid grid, const std::vector<StridedRuns>& held)
    : kind_(kind), grid_(grid), lanes_(LaneCount(kind), 0) {
  for (const StridedRuns& r : held) {
    if (r.run_count == 0 || r.run_bytes == 0) continue;
    held_.push_back(Normalized(r));
  }
  if (grid_.tile_bytes == 0) return;
  const uint64_t tb = grid_.tile_bytes;
  for (const StridedRuns& r : held_) {
    uint64_t touched = 0, whole = 0;
    if (r.run_count == 1 || r.stride_bytes % tb == 0) {  // every run cut alike
      CountRange(r.first_offset, r.first_offset + r.run_bytes, tb, &touched, &whole);
      cut_ += (touched - whole) * r.run_count;
      continue;
    }
    for (uint64_t i = 0; i < r.run_count; ++i) {
      const uint64_t from = r.first_offset + i * r.stride_bytes;
      CountRange(from, from + r.run_bytes, tb, &touched, &whole);
      cut_ += touched - whole;
    }
  }
}

bool TileProof::Whole(uint64_t tile) const {
  const uint64_t from = tile * grid_.tile_bytes, to = from + grid_.tile_bytes;
  for (const StridedRuns& r : held_) {
    if (from < r.first_offset) continue;
    const uint64_t i = r.run_count == 1 ? 0 : (from - r.first_offset) / r.stride_bytes;
    if (i >= r.run_count) continue;
    const uint64_t run_from = r.first_offset + i * r.stride_bytes;
    if (from >= run_from && to <= run_from + r.run_bytes) return true;
  }
  return false;
}

void TileProof::Add(uint64_t offset, absl::Span<const uint8_t> bytes) {
  const uint64_t tb = grid_.tile_bytes;
  if (tb == 0 || bytes.empty()) return;
  const uint64_t end = offset + bytes.size();
  const uint64_t first_whole = CeilDiv(offset, tb), end_whole = FloorDiv(end, tb);
  // Whole tiles inside this range: held whole by construction of the runs they came in.
  std::vector<uint16_t> local(lanes_.size(), 0);
  uint64_t hashed = 0;
  if (end_whole > first_whole) {
    AddTileTerms(kind_, first_whole, tb,
                 bytes.subspan((first_whole * tb) - offset, (end_whole - first_whole) * tb), local);
    hashed = end_whole - first_whole;
  }
  // The parts of tiles at either end: kept until the rest of a tile held whole arrives.
  std::vector<std::pair<uint64_t, std::pair<uint64_t, uint64_t>>> parts;  // tile, [from, to) in bytes
  if (offset % tb != 0) {
    const uint64_t tile = offset / tb;
    parts.push_back({tile, {offset, std::min(end, (tile + 1) * tb)}});
  }
  if (end % tb != 0 && (end / tb != offset / tb || offset % tb == 0)) {
    parts.push_back({end / tb, {std::max(offset, (end / tb) * tb), end}});
  }
  std::vector<std::pair<uint64_t, std::vector<uint8_t>>> completed;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [tile, range] : parts) {
    if (!Whole(tile)) continue;  // held in part: counted cut
    Fragment& f = fragments_[tile];
    if (f.bytes.empty()) f.bytes.assign(tb, 0);
    std::memcpy(f.bytes.data() + (range.first - tile * tb), bytes.data() + (range.first - offset),
                range.second - range.first);
    f.filled += range.second - range.first;
    if (f.filled == tb) {
      completed.emplace_back(tile, std::move(f.bytes));
      fragments_.erase(tile);
    }
  }
  for (const auto& [tile, tile_bytes] : completed) {
    AddTileTerms(kind_, tile, tb, tile_bytes, local);
    ++hashed;
  }
  for (size_t l = 0; l < lanes_.size(); ++l) lanes_[l] = static_cast<uint16_t>(lanes_[l] + local[l]);
  hashed_ += hashed;
}

void TileProof::AddRuns(const StridedRuns& runs, absl::Span<const uint8_t> bytes) {
  for (uint64_t i = 0; i < runs.run_count && (i + 1) * runs.run_bytes <= bytes.size(); ++i) {
    Add(runs.first_offset + i * runs.stride_bytes, bytes.subspan(i * runs.run_bytes, runs.run_bytes));
  }
}

TensorProofSum TileProof::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  TensorProofSum out;
  out.kind = kind_;
  out.lanes = lanes_;
  out.tiles_hashed = hashed_;
  out.tiles_cut = cut_ + fragments_.size();  // whole here, but some of their bytes never came
  return out;
}

}  // namespace metaload
