// A rank's view of the metad daemons, in plain types (no protobuf, no LibTorch in this
// header, so tensor code can include it without the two header sets meeting).
//
//   DaemonClient local("127.0.0.1:7070");
//   ML_ASSIGN_OR_RETURN(Assignment a, local.GetPlan("llama", /*world_size=*/4, StrategyOptions{}));
//   ML_RETURN_IF_ERROR(DaemonClient(server).ReadRange("llama", path, offset, dest_span, timeout));
//
// Thread-safety: a DaemonClient may be used from several threads at once.
#ifndef METALOAD_CLIENT_READ_DAEMON_CLIENT_H_
#define METALOAD_CLIENT_READ_DAEMON_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "planner/format/quantization.h"
#include "planner/format/tensor_layout.h"
#include "planner/plan/fanout.h"
#include "planner/plan/plan.h"
#include "planner/plan/slice.h"
#include "planner/strategy/strategy.h"
#include "util/fs/file_stamp.h"

namespace metaload {

struct FileRoute {
  std::string file;  // relative, as in ReadItem::file
  std::string path;  // absolute path on the nodes that serve it
  uint64_t size_bytes = 0;
  struct Server {
    std::string node;
    std::string address;
    // The name its TLS certificate must carry (the coordinator's tls.node_certificate for
    // `node`): a rank sends nothing to a server that cannot prove it. Empty: the cluster binds
    // no certificate to nodes (no mutual TLS); the certificate must name `address`'s host.
    std::string certificate;
  };
  std::vector<Server> servers;  // daemons that can read it, by node name
  // The whole file's size and mtime when registered; readers refuse a file that differs
  // (util/fs/file_stamp.h). Not recorded for registrations older than the field: unchecked.
  FileStamp registered;
};

// Where a registered model's tensors are stored (GetLayout): what a rank needs when its own
// module, not a plan, decides what it reads.
struct ModelLayout {
  std::vector<TensorLayout> tensors;
  std::map<std::string, FileRoute> files;  // by relative file name
  std::string skeleton_json;               // tied groups, the rules of computed buffers
  std::string init_missing;                // the policy the model was registered with
  std::string answered_by;
  std::string hf_config_json;   // the checkpoint folder's config.json as registered; "" without one
  bool proof_required = false;  // the cluster requires proof of content (require_digests)
};

struct Assignment {
  Plan plan;                                          // the whole plan, or only the asking rank's part
  std::map<std::string, FileRoute> files;             // by relative file name
  std::string answered_by;                            // node of the daemon that answered
  std::string skeleton_json;                          // the whole plan only
  std::vector<std::vector<std::string>> tied_groups;  // a rank's part: groups it holds
  std::string plan_digest;                            // of the whole plan: equal on every rank of a job
  std::string init_missing;                           // the policy the model was registered with
  bool proof_required = false;                        // the cluster requires proof of content
  // A dequantizing plan's quantization (GetPlanResponse.quantization_config_json, parsed by
  // ParseQuantization): what the rank pairs its items' codes and scales by. Absent otherwise.
  std::optional<Quantization> quantization;
  // Asked with `fanout`: the rank's part of the plan's fan-out, when the plan may share its
  // bytes (RankMayShare; empty: assigned, and nothing of it is shared); else none.
  std::optional<FanoutPart> fanout;
};

// Whether a stream's chunks must carry their CRC-32C (docs/integrity.md). A rank always requires
// them: a chunk without one comes from a daemon older than this client and is refused.
enum class ChunkChecksums {
  kRequired,
  // Accepted without: only to measure what checksums cost (tests/bench/stream_bench.cc, which
  // alone passes it); no rank path does.
  kOptionalForMeasurement,
};

class DaemonClient {
 public:
  explicit DaemonClient(const std::string& address, ChunkChecksums checksums = ChunkChecksums::kRequired);
  // A server a plan or layout names: over TLS its certificate must carry server.certificate
  // when set, checked in the handshake before any call (security/server_identity.h). A server
  // that fails fails every call UNAVAILABLE (a failed server: readers fail over), "the server at
  // ADDRESS is not node "b": its certificate is named "mallory", and node "b"'s must be named ...".
  explicit DaemonClient(const FileRoute::Server& server,
                        ChunkChecksums checksums = ChunkChecksums::kRequired);
  ~DaemonClient();
  const std::string& address() const { return address_; }

  // With `rank`: that rank's part of the plan, the files it reads and the tied groups it
  // holds (and with `fanout`, its part of the plan's read-once fan-out, checked against its items:
  // Assignment::fanout); without: the whole plan and every file. Errors carry the daemon's gRPC
  // code (NotFound for an unknown model, Unavailable when the daemon is down) and name the address.
  absl::StatusOr<Assignment> GetPlan(const std::string& model, int world_size, const StrategyOptions& options,
                                     std::optional<int> rank, absl::Duration timeout, bool fanout = false);

  // Streams [offset, offset + dest.size()) of `path`, a file of registered model `model`, into
  // `dest`; the daemon serves only bytes inside the model's tensors (PermissionDenied otherwise).
  // DataLoss if the daemon
  // sends bytes out of order or too few/many, or bytes that do not match their chunk's CRC-32C
  // ("checksum mismatch in <path> at bytes [a, b) from <server>"); FailedPrecondition if the
  // daemon sends chunks without checksums (it is older than this client).
  absl::Status ReadRange(const std::string& model, const std::string& path, uint64_t offset,
                         absl::Span<uint8_t> dest, absl::Duration timeout);
  // Streams whole runs first_run, first_run + 1, ... of `runs` (a tensor slice) end to end into
  // `dest`, whose size is a multiple of runs.run_bytes: the daemon gathers them, so a
  // row-parallel slice is one call, never one per row.
  // `cancelled` (optional): when it becomes true the stream is cancelled (Cancelled).
  // `registered` (optional): the file as registered; the daemon refuses, FailedPrecondition
  // "<path> changed since it was registered: ...", when the file it opens differs.
  // `received_bytes` (optional): set to the bytes at the front of `dest` that arrived in order
  // and matched their checksums, whatever the result (all of dest on success), so that a
  // reader resumes there (failover_read.h).
  // `stall_timeout`: a stream that delivers no byte for this long is cancelled and fails
  // DeadlineExceeded (a daemon that hangs, a host gone without a reset), long before `timeout`.
  absl::Status ReadRuns(const std::string& model, const std::string& path, const StridedRuns& runs,
                        uint64_t first_run, absl::Span<uint8_t> dest, absl::Duration timeout,
                        const std::atomic<bool>* cancelled = nullptr, const FileStamp& registered = {},
                        uint64_t* received_bytes = nullptr,
                        absl::Duration stall_timeout = absl::InfiniteDuration());
  // Where every tensor of `model` is stored, and who serves each file.
  absl::StatusOr<ModelLayout> GetLayout(const std::string& model, absl::Duration timeout);

 private:
  struct Impl;
  std::string address_;
  ChunkChecksums checksums_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace metaload

#endif  // METALOAD_CLIENT_READ_DAEMON_CLIENT_H_
