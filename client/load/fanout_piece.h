// One fan-out piece as both exchanges of client/load/fanout.h move it: over a group by
// broadcast (the user's replica groups) and down a chain of point-to-point sends on one group
// of the job (client/load/fanout_chain.h). The same header, the same chunks, the same rule for
// what a receiver keeps.
//
// The header, int64 words: [0] 1 when the reader filled the piece, [1] 0, [2 .. 2 + chunks)
// each chunk's CRC-32C, then the reader's proof of its bytes against the registered digest
// (tiles hashed, tiles cut, lanes: client/verify/tensor_proof.h) when the item has one.
//
// Thread-safety: plain functions; a PieceBytes is used by one thread.
#ifndef METALOAD_CLIENT_LOAD_FANOUT_PIECE_H_
#define METALOAD_CLIENT_LOAD_FANOUT_PIECE_H_

#include <torch/types.h>

#include <algorithm>
#include <cstdint>
#include <optional>

#include "client/load/fanout.h"
#include "client/read/fill.h"

namespace metaload {

// One piece's bytes on this rank: its tensor's memory, in chunks of `chunk_bytes`.
struct PieceBytes {
  at::Tensor tensor;
  uint64_t size_bytes = 0;
  uint64_t chunk_bytes = 0;
  size_t chunks() const { return size_bytes == 0 ? 0 : (size_bytes + chunk_bytes - 1) / chunk_bytes; }
  uint64_t ChunkSize(size_t c) const { return std::min(chunk_bytes, size_bytes - c * chunk_bytes); }
};

// Chunk `c` of a piece's bytes, in the tensor's own memory (on its device).
at::Tensor ChunkOf(const PieceBytes& bytes, size_t c);

// CRC-32C of bytes anywhere (a GPU's are copied to the host first).
uint32_t CrcOf(const at::Tensor& chunk);

// The header words a piece's proof takes: every member holds the same item, with the same
// proof template, so every member counts the same words.
size_t ProofWords(const std::optional<TensorProof>& proof);

// The header's length in words.
int64_t HeaderWords(const PieceBytes& bytes, const std::optional<TensorProof>& proof_template);

// The header the reader sends for its read `mine` of the piece (not filled: all zeros, and
// its receivers read the piece themselves).
at::Tensor ReaderHeader(const PieceBytes& bytes, const FillResult& mine,
                        const std::optional<TensorProof>& proof_template);

// What a receiver makes of a piece all of whose chunks came in (`intact`: each matched its
// CRC-32C in `header`, on the host): `result` filled from rank `reader` with the reader's
// proof, counted into `out` and `meter`; or, when the reader did not fill it or a chunk did
// not match, the item goes to out.read_yourself (with a note for a mismatch).
void TakeReceivedPiece(const PieceBytes& bytes, const at::Tensor& header, bool intact, int reader,
                       size_t item, FillResult& result, ExchangeOutcome& out, ProgressMeter* meter);

}  // namespace metaload

#endif  // METALOAD_CLIENT_LOAD_FANOUT_PIECE_H_
