// Filling tensors with their bytes from a checkpoint: the reading engine under both the
// plan-driven rank load (client/load/rank_loader.h) and the module-driven materialize
// (client/resolve/materialize.h).
//
// Each target says where its bytes are stored and which part of the tensor it holds. A file
// this host can open at its full size is read directly (Source::kAuto); other files are
// streamed from a daemon that serves them, and so are files of an object store that a daemon
// serves (FileSystem::IsObjectStore: the node's daemon fetches each range of the bucket once
// for its ranks; Source::kDirect still has every rank read the bucket itself). Reads are cut into pieces
// (pieces.h) that worker threads take in order; CPU targets are read straight into their storage, CUDA
// targets through a pinned staging buffer per worker. A target held in another dtype than stored is read into
// a temporary of the stored dtype and converted when its last piece has arrived.
//
//   std::vector<FillTarget> targets = ...;   // dest tensors already allocated
//   ML_ASSIGN_OR_RETURN(FillOutcome outcome, FillTargets(targets, routes, settings));
//
// A piece whose stream breaks resumes from its last byte on the file's next source (direct read,
// this node's daemon, the other servers least loaded first), or on the same one after it comes
// back (failover_read.h); each switch is recorded in the target's result. A target whose bytes
// could not be read from any source is reported in its result, not as an error, so that
// verification can name it on every rank.
#ifndef METALOAD_CLIENT_READ_FILL_H_
#define METALOAD_CLIENT_READ_FILL_H_

#include <torch/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/read/daemon_client.h"
#include "client/read/failover_read.h"
#include "client/read/progress_meter.h"
#include "client/read/provenance.h"
#include "client/verify/tensor_proof.h"
#include "planner/format/tensor_layout.h"
#include "planner/plan/slice.h"
#include "util/fs/file_system.h"
#include "util/hash/tile_digest.h"

namespace metaload {

enum class Source { kAuto, kDirect, kStream };

absl::StatusOr<Source> ParseSource(const std::string& text);  // auto|direct|stream

// How a rank reads: the settings `metactl load` (LoadOptions), materialize (MaterializeSettings)
// and FillTargets (FillSettings) share, one struct embedded in each so that none drifts.
struct ReadSettings {
  // auto: direct when this host can open the file at its full size, but an object store's file
  // through the daemons that serve it when there are any.
  Source source = Source::kAuto;
  int read_threads = 2;  // parallel preads / streams
  absl::Duration timeout = absl::Minutes(10);
  // A stream that delivers no byte for this long is given up and resumed on the file's next
  // source (a daemon that hangs, a host gone without a reset).
  absl::Duration stall_timeout = absl::Seconds(30);
  RetryPolicy retry;  // when a source fails (source_order.h)
  // When set and it becomes true, pieces not yet read fail "cancelled", and streams in flight
  // are cancelled: a Ctrl-C in the training process stops a load promptly.
  const std::atomic<bool>* cancelled = nullptr;
  // What direct reads open files through (util/fs/file_system.h); null: the file system of each
  // location's scheme (FileSystemFor). Tests hand one that injects faults
  // (tests/faults/fault_file_system.h). Must outlive the reads.
  FileSystem* file_system = nullptr;
  // Told how far the load is (include/metaload/progress.h): every `progress_interval` while it
  // runs, and once at its end. LoadRank and Materialize start the meter (progress_meter.h) and
  // set `meter` for the reads, the fan-out and dequantization to count into; null: nothing is
  // counted.
  ProgressCallback progress;
  absl::Duration progress_interval = absl::Milliseconds(200);
  ProgressMeter* meter = nullptr;
  // Where in its pieces a reader starts: member `stagger_index` of `stagger_count` readers of
  // the same files starts stagger_index / stagger_count of the way in and wraps around, so that
  // a job's ranks do not all open the first file at once (one NFS server, storage target or
  // object prefix per file takes each file's readers together). LoadRank sets its rank and
  // world; 0 of 1 (or anything out of range): from the first piece, in order.
  int stagger_index = 0;
  int stagger_count = 1;
};

// The piece a reader of `pieces` pieces starts at under `read`'s stagger (above).
size_t FirstPiece(const ReadSettings& read, size_t pieces);

struct FillTarget {
  std::string name;
  // File, byte range, stored dtype and whole shape; with its registered digest, the terms of the
  // tiles this target holds are summed from the bytes as read (before any conversion, on any
  // device: CUDA targets' bytes in their staging buffer), for verification to check across ranks.
  TensorLayout stored;
  std::optional<TensorBox> box;  // absent: the whole tensor
  // On the rank's device, contiguous, the box's shape, in the dtype to hold.
  at::Tensor dest;
  // A tensor of the caller's (counted in LoadProgress::tensors_done when filled), not a part
  // read to compute one (a dequantized value's codes and scales).
  bool counts_as_tensor = true;
};

struct FillResult {
  bool filled = false;
  // kDirect / kStream and every source that delivered bytes, in order (several when it failed
  // over); converted_to when converted on load. kNone for an empty target (nothing to read)
  // and for one that could not be read at all.
  Provenance provenance;
  std::string error;                     // why it is not filled: the tensor, its file and each source's error
  std::vector<FailoverEvent> failovers;  // at_byte: of this target's bytes, in order of time
  // A filled read: what its bytes prove of the stored tensor (client/verify/tensor_proof.h):
  // with a registered digest, the sum of the terms of the tiles held whole here, those hashed
  // and those held only in part; without, only that it was read. Arrived by fan-out: the
  // sender's, for the same bytes (client/load/fanout.h), whose chunks' CRC-32C checked that
  // they arrived as sent.
  std::optional<TensorProof> proof;
  // A value computed from several stored tensors (a dequantized one: `proof` its codes'): the
  // proofs of the others (its scales').
  std::vector<TensorProof> more_proofs;
};

struct FillSettings {
  // The registered model the targets belong to: daemons stream only its tensors' bytes.
  std::string model;
  std::string own_node;  // the node of the daemon this rank asked: its server is preferred
  ReadSettings read;
};

struct FillOutcome {
  std::vector<FillResult> results;                         // one per target, in order
  uint64_t direct_bytes = 0;                               // bytes that arrived, read directly
  uint64_t streamed_bytes = 0;                             // bytes that arrived, streamed
  std::map<std::string, uint64_t> streamed_bytes_by_node;  // the same, by the node that sent them
};

// Told of one target as soon as it is filled: its index and its result as the outcome will hold
// it. Called from a read thread while other targets are still read; must not block for long.
using FilledFn = std::function<void(size_t index, const FillResult& result)>;

// `routes` maps each file name (relative, as in TensorLayout::file) to its path and servers.
// `on_filled`, when set, is told of each target read from a file once its last piece is in
// and converted (a fan-out reader sends it then, not after the whole batch); a target that
// fails, or has nothing to read, is only in the outcome. Errors only for what no target could
// survive (allocating a conversion temporary).
absl::StatusOr<FillOutcome> FillTargets(std::vector<FillTarget>& targets,
                                        const std::map<std::string, FileRoute>& routes,
                                        const FillSettings& settings, const FilledFn& on_filled = {});

}  // namespace metaload

#endif  // METALOAD_CLIENT_READ_FILL_H_
