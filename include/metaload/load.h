// metaload/load.h: one rank's plan-driven load, what `metactl load` and `metaload.load` run.
// The rank asks the daemon of its node for its part of the plan, allocates only its own tensors
// directly on its device (never on meta, never moved afterwards) and fills them: reading the
// checkpoint files itself when this host can, streaming their byte ranges from a daemon that
// serves them otherwise. Then verify them across ranks (metaload/verify.h).
//
//   metaload::LoadRankOptions options{.model = "llama", .daemon = "127.0.0.1:7070",
//                                     .rank = 3, .world_size = 4, .device = "cuda",
//                                     .strategy = "tp", .tp = 2};
//   absl::StatusOr<metaload::LoadedRank> load = metaload::LoadRank(options);
//   if (!load.ok()) return metaload::ExitCodeOf(metaload::KindOf(load.status()));
//   for (const metaload::LoadedRank::Tensor& t : load->tensors()) ...t.name, t.tensor, t.box...
//   absl::StatusOr<metaload::Verdict> verdict = metaload::VerifyAcrossRanks(*load);
//
// Every rank passes the same model, strategy and world size (verification proves they did).
// What a rank receives of the plan does not grow with the cluster. A tensor whose bytes could
// not be read is returned unfilled with the reason, not as an error, so that verification names
// it on every rank; errors are for the plan itself (a bad request, an unknown model, a daemon
// that cannot be reached).
//
// Lifetimes: a LoadedRank is a shared handle (copies see the same tensors; a moved-from one may
// only be assigned to or destroyed); its tensors are ordinary at::Tensor handles that outlive it.
// Thread-safety: LoadRank is reentrant; a LoadedRank may be read from many threads at once.
#ifndef METALOAD_INCLUDE_METALOAD_LOAD_H_
#define METALOAD_INCLUDE_METALOAD_LOAD_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "metaload/materialize.h"  // ReadOptions, Box, TensorResult

namespace metaload {

struct LoadRankOptions {
  std::string model;   // REQUIRED: the registered name
  std::string daemon;  // REQUIRED: the daemon of this rank's node (host:port)
  int rank = 0;
  int world_size = 1;
  std::string device = "cpu";  // cpu | cuda | cuda:N ("cuda": cuda:LOCAL_RANK, else rank % GPUs)
  // How the plan splits the model, the same on every rank: "layers", "tp" (with tp, pp: pp 0 is
  // world_size / tp), "fsdp", "replicate".
  std::string strategy = "layers";
  int tp = 1;
  int pp = 0;
  std::optional<std::string> dtype;  // convert stored F16/BF16/F32/F64 tensors on load ("bf16")
  ReadOptions read;
  bool huge_pages = false;  // CPU ranks: MADV_HUGEPAGE on the tensors' memory
  // For tensors the checkpoint lacks. Unset: the policy the model was registered with; set, it
  // must be that policy (InvalidArgument otherwise).
  std::optional<std::string> init_missing;
};

// What one rank loaded. Opaque; copies share it.
class LoadedRank {
 public:
  struct Tensor {
    std::string name;
    at::Tensor tensor;                // on the rank's device: its part, in the held dtype
    std::vector<int64_t> full_shape;  // the whole tensor's shape
    std::optional<Box> box;           // the part of the whole this rank holds; absent: all of it
    TensorResult result;              // filled, where from (kTied: shares a stored tensor's storage)
  };

  int rank() const;
  int world_size() const;
  const std::string& node() const;         // the node the plan places this rank on
  const std::string& answered_by() const;  // the node of the daemon asked
  const std::string& device() const;       // "cuda:3", "cpu"
  const std::string& plan_digest() const;  // the coordinator's digest of the whole plan
  const std::string& plan_label() const;   // "tp 2 x pp 1 x 2 replicas, 4 ranks, to BF16"
  const std::vector<Tensor>& tensors() const;
  // Why this rank could not load at all; it still joins verification, so that every rank
  // learns the reason instead of waiting for one that never arrives.
  const std::vector<std::string>& failures() const;
  uint64_t direct_bytes() const;    // bytes that arrived, read directly
  uint64_t streamed_bytes() const;  // bytes that arrived, streamed
  double seconds() const;           // plan received -> every byte in place

 private:
  struct Impl;                     // client/api/load.cc
  friend struct LoadedRankAccess;  // the same
  explicit LoadedRank(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

absl::StatusOr<LoadedRank> LoadRank(const LoadRankOptions& options);

}  // namespace metaload

#endif  // METALOAD_INCLUDE_METALOAD_LOAD_H_
