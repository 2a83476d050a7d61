// metaload/progress.h: how far one rank's load is, for a launcher that draws its own progress
// (what `metactl load` draws its line from, and the Python package its bar).
//
//   metaload::MaterializeOptions options;
//   options.read.progress = [](const metaload::LoadProgress& p) {
//     std::fprintf(stderr, "\r%llu of %llu bytes", (unsigned long long)p.done_bytes(),
//                  (unsigned long long)p.total_bytes);
//   };
//   absl::StatusOr<metaload::MaterializeReport> report = metaload::Materialize(model, requests, options);
//
// The callback (ReadOptions::progress, metaload/materialize.h) is called every
// ReadOptions::progress_interval while the load runs, from a thread the load starts for it and
// never from a thread that reads: a slow callback delays only the next record, never a byte.
// Then once more, with `finished` set, on the thread that called LoadRank or Materialize,
// before it returns (also when it returns an error). Never two calls at once. A callback that
// throws is called no more (a warning says why); the load goes on as if it had none.
//
// Every count is cumulative and never decreases, except `total_bytes`, which a fan-out may
// correct once it knows which tensors arrive from other ranks (in the dtype they are held in,
// not the stored one). In the last record, direct_bytes + streamed_bytes + received_bytes are
// exactly the bytes the load's report counts (LoadedRank::direct_bytes() and streamed_bytes(),
// MaterializeReport's, `metactl load --report`'s bytes_read and fanout_received_bytes); they
// reach total_bytes when every tensor arrived as planned.
//
// Header-only; the record is also the library's own (client/read/progress_meter.h).
#ifndef METALOAD_INCLUDE_METALOAD_PROGRESS_H_
#define METALOAD_INCLUDE_METALOAD_PROGRESS_H_

#include <cstdint>
#include <functional>

namespace metaload {

// One rank's load so far.
struct LoadProgress {
  uint64_t direct_bytes = 0;    // read from checkpoint files this host opened
  uint64_t streamed_bytes = 0;  // streamed from daemons
  uint64_t received_bytes = 0;  // received from other ranks by fan-out
  uint64_t total_bytes = 0;     // what this rank is to read or receive
  uint64_t tensors_done = 0;    // tensors whose values came from the checkpoint, filled so far
  uint64_t tensors_total = 0;   // tensors whose values come from the checkpoint
  double seconds = 0;           // since the reads began
  bool finished = false;        // the last record of this load

  uint64_t done_bytes() const { return direct_bytes + streamed_bytes + received_bytes; }
};

using ProgressCallback = std::function<void(const LoadProgress&)>;

}  // namespace metaload

#endif  // METALOAD_INCLUDE_METALOAD_PROGRESS_H_
