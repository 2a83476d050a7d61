// How a rank cuts its reads: every item's runs (planner/plan/slice.h) into pieces of at most
// kPieceBytes, each read by one worker thread with one call (a pread, a preadv, or one
// ReadRange stream). Pure and torch-free.
//
//   std::vector<Piece> pieces;
//   CutPieces(tensor_index, "/models/m/model.safetensors", /*server=*/"", runs, &pieces);
#ifndef METALOAD_CLIENT_READ_PIECES_H_
#define METALOAD_CLIENT_READ_PIECES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "planner/plan/slice.h"
#include "util/fs/file_stamp.h"

namespace metaload {

// Small enough to spread one big tensor over every reader thread and to bound the pinned
// staging buffer a CUDA rank needs, large enough that per-call cost vanishes.
inline constexpr uint64_t kPieceBytes = 16ull << 20;

// One read: `runs` (a contiguous range, or whole runs of a strided slice) end to end into
// bytes [dest_offset, dest_offset + runs.total_bytes()) of the tensor's read target.
struct Piece {
  size_t tensor_index = 0;
  std::string path;    // absolute file path
  std::string server;  // empty: read directly; else the daemon to stream from
  std::string server_node;
  StridedRuns runs;
  uint64_t dest_offset = 0;
  FileStamp registered;  // the file as registered: a streaming daemon refuses it changed
};

// Appends `runs` cut into pieces of at most `piece_bytes`: a contiguous range by bytes; a
// strided slice by whole runs (so that the daemon gathers each piece in one call), or, when
// one run is at least half a piece, each run by bytes. The pieces cover the runs exactly,
// in order, with dest offsets laid end to end from 0.
void CutPieces(size_t tensor_index, const std::string& path, const std::string& server,
               const std::string& server_node, const StridedRuns& runs, std::vector<Piece>* pieces,
               uint64_t piece_bytes = kPieceBytes);

}  // namespace metaload

#endif  // METALOAD_CLIENT_READ_PIECES_H_
