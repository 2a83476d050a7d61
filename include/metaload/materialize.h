// metaload/materialize.h: fill tensors the caller allocated — by name, whole or a box of the
// whole (a DTensor's local shard) — from a model registered with a daemon, or from a folder of
// safetensors this host reads. What the Python package's `metaload.materialize` runs: the
// caller, not a plan, decides what this rank reads.
//
//   absl::StatusOr<metaload::Model> model =
//       metaload::Model::Open({.name = "llama", .checkpoint = "/models/llama-8b"});
//   if (!model.ok()) return model.status();
//   std::vector<metaload::TensorRequest> requests;
//   for (const metaload::StoredTensor& t : model->stored()) {
//     requests.push_back({.name = t.name, .full_shape = t.shape,
//                         .dest = at::empty(t.shape, at::TensorOptions().dtype(t.dtype))});
//   }
//   absl::StatusOr<metaload::MaterializeReport> report = metaload::Materialize(*model, requests);
//   if (!report.ok()) return report.status();
//   if (!report->refused.empty()) ...nothing was read: report->summary says why...
//   for (const metaload::TensorResult& r : report->results) ...r.filled, r.provenance...
//
// Every request is resolved before any byte is read: a tensor the checkpoint stores, an alias
// of a tied group (filled from the stored tensor, read once), a non-persistent buffer with a
// rule to compute it, or missing. A missing tensor (unless `init_missing` fills it) or a shape
// other than the checkpoint's refuses the whole call, so that no tensor is left half-read.
//
// Lifetimes: a Model is a shared, immutable handle (copies are cheap and see the same model; a
// moved-from one may only be assigned to or destroyed); the requests' destinations must stay
// allocated until Materialize returns.
// Thread-safety: a Model may be used from many threads at once; Materialize is reentrant and
// writes only the requests' destinations.
#ifndef METALOAD_INCLUDE_METALOAD_MATERIALIZE_H_
#define METALOAD_INCLUDE_METALOAD_MATERIALIZE_H_

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "metaload/progress.h"

namespace metaload {

// Where a rank's bytes come from.
enum class ReadFrom {
  kAuto,    // read a file directly when this host can open it at its full size, else stream it
  kDirect,  // only direct reads (a file this host cannot read fails its tensors)
  kStream,  // only streams from the daemons that serve the file
};

// How a rank reads; the same for LoadRank (metaload/load.h) and Materialize.
struct ReadOptions {
  ReadFrom source = ReadFrom::kAuto;
  int read_threads = 2;  // parallel preads / streams; 1..64
  absl::Duration timeout = absl::Minutes(10);
  // A stream that delivers no byte for this long is given up and resumed on the file's next
  // server (a daemon that hangs, a host gone without a reset).
  absl::Duration stall_timeout = absl::Seconds(30);
  // When set and it becomes true, reads not yet done fail "cancelled" and streams in flight are
  // cancelled. Must stay live until the call returns.
  const std::atomic<bool>* cancelled = nullptr;
  // Told how far the load is (metaload/progress.h): every `progress_interval` (10 ms to 1 min)
  // from a thread of the load's own, then once at its end. Empty: nothing is counted.
  ProgressCallback progress;
  absl::Duration progress_interval = absl::Milliseconds(200);
};

// A part of a tensor: per dimension, where it starts and how long it is.
struct Box {
  std::vector<int64_t> start;
  std::vector<int64_t> length;
};

// Where a tensor's values came from.
enum class ProvenanceKind {
  kNone,    // nothing delivered it: an empty part (nothing to read), or a read that never started
  kDirect,  // read from a file this host opened
  kStream,  // streamed from a daemon
  kInit,    // initialized by the init policy (`init_missing`)
  kBuffer,  // a non-persistent buffer computed by its rule (rotary inv_freq)
  kTied,    // an alias of a tied group: the same tensor as the stored one, read once
  kModule,  // a buffer with no rule: the caller's module must compute it (not filled)
  kFanout,  // checkpoint bytes another rank read and sent (`metactl load`'s fan-out)
};

// One switch of source while streaming: the read resumed from its last byte elsewhere.
struct Failover {
  std::string from;  // the node that failed, or "direct"
  std::string to;
  uint64_t at_byte = 0;  // of this tensor's bytes
  std::string error;     // why `from` failed
};

// What became of one tensor.
struct TensorResult {
  bool filled = false;
  ProvenanceKind provenance_kind = ProvenanceKind::kNone;
  // The same as metactl prints it: "direct", "stream:a+b>BF16" (every server that delivered, then
  // the dtype it was converted to), "init:zeros", "buffer:<rule>", "tied", "module".
  std::string provenance;
  std::string error;  // why it is not filled: the tensor, its file and each source's error
  std::vector<Failover> failovers;
};

// A tensor the model's checkpoint stores.
struct StoredTensor {
  std::string name;
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::ScalarType::Undefined;  // as stored (another dtype is converted on load)
  std::string file;                                  // the file holding it, relative to the checkpoint folder
};

// Which model, from where: a daemon that has it registered (`metactl register`), or a
// checkpoint folder (or one .safetensors file) this host reads. Exactly one of the two.
struct OpenModelOptions {
  std::string name;        // the registered name; with `checkpoint`, a name for messages
  std::string daemon;      // host:port
  std::string checkpoint;  // a folder of safetensors (Hugging Face layout) or one file
  absl::Duration timeout = absl::Minutes(5);
};

// An opened model: what it stores, its tied aliases and computed buffers, and who serves its
// files. Opaque; copies share one immutable model.
class Model {
 public:
  // InvalidArgument / NotFound for a bad source, an unknown model or an unreadable checkpoint;
  // Unavailable when the daemon cannot be reached.
  static absl::StatusOr<Model> Open(const OpenModelOptions& options);

  const std::string& name() const;
  // "daemon 127.0.0.1:7070" / "checkpoint /models/x".
  const std::string& origin() const;
  // The node of the daemon that answered ("" for a checkpoint).
  const std::string& answered_by() const;
  // The init policy the model was registered with ("error", "zeros", "normal:0.02").
  const std::string& init_missing() const;
  const std::vector<StoredTensor>& stored() const;                 // by name
  const StoredTensor* Find(const std::string& name) const;         // nullptr when not stored
  const std::map<std::string, std::string>& tied_to() const;       // alias -> its stored name
  const std::map<std::string, std::string>& buffer_rules() const;  // buffer -> its rule

 private:
  struct Impl;                // client/api/materialize.cc
  friend struct ModelAccess;  // the same
  explicit Model(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// One tensor, or the part of it this rank holds, to fill.
struct TensorRequest {
  std::string name;                 // its name in the checkpoint (or a tied alias, or a buffer)
  std::vector<int64_t> full_shape;  // the whole tensor's shape, as the caller's module declares it
  std::optional<Box> box;           // the part held here; absent: all of it
  bool is_buffer = false;           // a buffer (its module may compute it), not a parameter
  // Allocated, contiguous: the box's shape, the dtype to hold, on this rank's device. May be a
  // meta tensor with `check_only`.
  at::Tensor dest;
};

struct MaterializeOptions {
  ReadOptions read;
  // For tensors the checkpoint lacks: "zeros" or "normal:STD" initializes them, "error" refuses.
  // Unset: the policy the model was registered with.
  std::optional<std::string> init_missing;
  // Resolve only: say whether the call would be refused, touching no destination (they may be
  // on meta), before the caller allocates anything; results then mark only kModule requests.
  bool check_only = false;
};

// A tensor that would stay on meta, and why.
struct TensorFinding {
  std::string tensor;
  std::string why;
};

struct MaterializeReport {
  // Non-empty: nothing was read or written; each names a tensor and why it would stay on meta.
  std::vector<TensorFinding> refused;
  // The same findings grouped for people (a run of missing layers is one line): what to show.
  std::vector<std::string> summary;
  std::vector<TensorResult> results;  // one per request, in order
  uint64_t direct_bytes = 0;          // bytes that arrived, read directly
  uint64_t streamed_bytes = 0;        // bytes that arrived, streamed
};

// Fills `requests` from `model`. Errors only for what no tensor could survive (bad options, a
// conversion buffer that cannot be allocated); a tensor whose bytes could not be read is
// reported in its result, not filled.
absl::StatusOr<MaterializeReport> Materialize(const Model& model, std::vector<TensorRequest>& requests,
                                              const MaterializeOptions& options = {});

}  // namespace metaload

#endif  // METALOAD_INCLUDE_METALOAD_MATERIALIZE_H_
