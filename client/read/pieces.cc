#include "client/read/pieces.h"

#include <algorithm>

namespace metaload {

void CutPieces(size_t tensor_index, const std::string& path, const std::string& server,
               const std::string& server_node, const StridedRuns& runs, std::vector<Piece>* pieces,
               uint64_t piece_bytes) {
  if (runs.run_count == 0 || runs.run_bytes == 0) return;  // no bytes, no pieces
  auto contiguous = [&](uint64_t offset, uint64_t bytes, uint64_t dest_offset) {
    for (uint64_t done = 0; done < bytes; done += piece_bytes) {
      const uint64_t n = std::min(piece_bytes, bytes - done);
      pieces->push_back(Piece{tensor_index, path, server, server_node, StridedRuns{offset + done, n, n, 1},
                              dest_offset + done});
    }
  };
  if (runs.run_count == 1 || runs.run_bytes >= piece_bytes / 2) {
    for (uint64_t r = 0; r < runs.run_count; ++r) {
      contiguous(runs.first_offset + r * runs.stride_bytes, runs.run_bytes, r * runs.run_bytes);
    }
    return;
  }
  const uint64_t runs_per_piece = piece_bytes / runs.run_bytes;
  for (uint64_t r = 0; r < runs.run_count; r += runs_per_piece) {
    const uint64_t count = std::min(runs_per_piece, runs.run_count - r);
    pieces->push_back(Piece{
        tensor_index, path, server, server_node,
        StridedRuns{runs.first_offset + r * runs.stride_bytes, runs.run_bytes, runs.stride_bytes, count},
        r * runs.run_bytes});
  }
}

}  // namespace metaload
