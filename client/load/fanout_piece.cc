#include "client/load/fanout_piece.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "client/read/progress_meter.h"
#include "util/hash/crc32c.h"
#include "util/hash/tile_digest.h"

namespace metaload {

at::Tensor ChunkOf(const PieceBytes& bytes, size_t c) {
  return bytes.tensor.view({-1})
      .view(torch::kByte)
      .narrow(0, static_cast<int64_t>(c * bytes.chunk_bytes), static_cast<int64_t>(bytes.ChunkSize(c)));
}

uint32_t CrcOf(const at::Tensor& chunk) {
  const at::Tensor host = chunk.is_cpu() ? chunk : chunk.cpu();
  return Crc32c(
      absl::MakeConstSpan(static_cast<const uint8_t*>(host.data_ptr()), static_cast<size_t>(host.nbytes())));
}

size_t ProofWords(const std::optional<TensorProof>& proof) {
  return proof.has_value() && proof->digest.has_value() ? 2 + LaneCount(proof->digest->kind) : 0;
}

int64_t HeaderWords(const PieceBytes& bytes, const std::optional<TensorProof>& proof_template) {
  return static_cast<int64_t>(2 + bytes.chunks() + ProofWords(proof_template));
}

at::Tensor ReaderHeader(const PieceBytes& bytes, const FillResult& mine,
                        const std::optional<TensorProof>& proof_template) {
  const size_t proof_words = ProofWords(proof_template);
  at::Tensor header = torch::zeros({HeaderWords(bytes, proof_template)}, torch::kInt64);
  if (!mine.filled) return header;
  int64_t* h = header.data_ptr<int64_t>();
  h[0] = 1;
  for (size_t c = 0; c < bytes.chunks(); ++c) h[2 + c] = CrcOf(ChunkOf(bytes, c));
  // What the reader's bytes prove is what the receivers' prove once every chunk's CRC-32C
  // matched: the same bytes.
  int64_t* proof = h + 2 + bytes.chunks();
  if (proof_words > 0 && mine.proof.has_value() && mine.proof->sum.lanes.size() + 2 == proof_words) {
    proof[0] = static_cast<int64_t>(mine.proof->sum.tiles_hashed);
    proof[1] = static_cast<int64_t>(mine.proof->sum.tiles_cut);
    for (size_t l = 0; l < mine.proof->sum.lanes.size(); ++l) proof[2 + l] = mine.proof->sum.lanes[l];
  }
  return header;
}

void TakeReceivedPiece(const PieceBytes& bytes, const at::Tensor& header, bool intact, int reader,
                       size_t item, FillResult& result, ExchangeOutcome& out, ProgressMeter* meter) {
  const int64_t* h = header.data_ptr<int64_t>();
  if (h[0] != 1) {  // its reader could not read it: every holder reads it itself
    out.read_yourself.push_back(item);
    return;
  }
  if (!intact) {
    out.notes.push_back(absl::StrCat("a fan-out chunk from rank ", reader,
                                     " did not match its CRC-32C: read from storage instead"));
    out.read_yourself.push_back(item);
    return;
  }
  result.filled = true;
  result.error.clear();
  result.provenance = Provenance{.kind = Provenance::Kind::kFanout, .rule = absl::StrCat("rank ", reader)};
  if (const size_t words = ProofWords(result.proof); words > 0) {
    const int64_t* proof = h + 2 + bytes.chunks();
    TensorProofSum& sum = result.proof->sum;
    sum.tiles_hashed = static_cast<uint64_t>(std::max<int64_t>(0, proof[0]));
    sum.tiles_cut = static_cast<uint64_t>(std::max<int64_t>(0, proof[1]));
    sum.lanes.assign(words - 2, 0);
    for (size_t l = 0; l + 2 < words; ++l) sum.lanes[l] = static_cast<uint16_t>(proof[2 + l]);
  }
  out.received_bytes += bytes.size_bytes;
  if (meter != nullptr) {
    meter->AddReceived(bytes.size_bytes);
    meter->TensorDone();
  }
}

}  // namespace metaload
