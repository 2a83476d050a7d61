// The rank library: one rank asks a daemon for its part of the plan, allocates only its own
// tensors directly on its device (never on meta, never moved afterwards), and fills them —
// reading the checkpoint files itself when its node can see them, otherwise streaming the
// byte ranges from a daemon that can.
//
//   LoadOptions options;
//   options.model = "llama"; options.daemon = "127.0.0.1:7070";
//   options.rank = 3; options.world_size = 4; options.device = "cuda";
//   ML_ASSIGN_OR_RETURN(RankLoad load, LoadRank(options));
//   ML_ASSIGN_OR_RETURN(VerifyOutcome v, VerifyAcrossRanks(load, verify_options));  // verify/verify.h
//
// The rank asks for its own part of the plan only (what it receives does not grow with the
// cluster). Each plan item becomes the request materialize takes (its slice a box of the whole
// tensor), resolved and filled as materialize does (client/resolve/resolver.h). With
// Source::kAuto it reads a file directly whenever this host can open it at its full size, and
// streams it from a daemon otherwise.
//
// A tensor whose bytes could not be read is returned unfilled with the reason, not as an
// error: verification then names it on every rank. Errors are for the plan itself.
//
// Thread-safety: LoadRank is reentrant.
#ifndef METALOAD_CLIENT_LOAD_RANK_LOADER_H_
#define METALOAD_CLIENT_LOAD_RANK_LOADER_H_

#include <torch/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/load/fanout.h"
#include "client/read/fill.h"
#include "planner/plan/plan.h"
#include "planner/skeleton/init_policy.h"
#include "planner/strategy/strategy.h"

namespace metaload {

struct LoadOptions {
  std::string model;
  std::string daemon;  // the daemon of this rank's node (host:port)
  int rank = 0;
  int world_size = 1;
  std::string device = "cpu";  // cpu | cuda | cuda:N ("cuda": LOCAL_RANK, else rank % GPUs)
  StrategyOptions strategy;    // how the plan splits the model (the same on every rank)
  // Where from (auto: direct when this host can read the file), threads, timeouts, retries,
  // cancellation (client/read/fill.h).
  ReadSettings read;
  bool huge_pages = false;  // CPU ranks: MADV_HUGEPAGE on the tensors' memory (host_arena.h)
  // For tensors the checkpoint lacks (plan items marked missing). Unset: the policy the model
  // was registered with; set, it must be that policy (InvalidArgument otherwise).
  std::optional<InitPolicy> init_missing;
  // Read once, fan out (client/load/fanout.h): set, pieces the plan gives several ranks are
  // read by one of them and sent to the others; absent, every rank reads all of its tensors.
  std::optional<FanoutSettings> fan_out;
};

struct LoadedTensor {
  std::string name;
  at::Tensor tensor;                 // on the rank's device: the rank's slice, in the held dtype
  std::optional<TensorSlice> slice;  // which part of the whole tensor (absent: all of it)
  std::vector<int64_t> full_shape;   // the whole tensor's shape
  bool filled = false;
  // A read (its sources; converted_to when converted on load), kInit, kBuffer, or kTied for an
  // alias: shares the storage of the stored tensor `provenance.tied_to`, read once
  // (client/read/provenance.h).
  Provenance provenance;
  std::string error;                     // why it is not filled
  std::vector<FailoverEvent> failovers;  // each switch of source while reading it (client/read/fill.h)
  // A read: what its bytes prove of the stored tensor, for verification to sum across ranks
  // (client/verify/tensor_proof.h). Absent for what was not read (buffers, inits, aliases).
  std::optional<TensorProof> proof;
  // A dequantized value: `proof` is its codes', these its scales' (FillResult::more_proofs),
  // summed by verification like any stored tensor's.
  std::vector<TensorProof> more_proofs;
};

struct RankLoad {
  int rank = 0;
  int world_size = 0;
  std::string node;         // the node the plan places this rank on
  std::string answered_by;  // the node of the daemon we asked
  std::string device;
  std::string plan_digest;  // the coordinator's digest of the whole plan (verification compares it)
  std::string plan_label;   // "layers, 4 ranks" / "tp 2 x pp 1 x 2 replicas, 4 ranks, to BF16"
  std::vector<LoadedTensor> tensors;
  bool has_digests = false;  // its plan carries registered digests (docs/integrity.md)
  // The coordinator requires proof of content (require_digests): the load fails unless every
  // tensor's bytes are proven, as with --require-proof.
  bool proof_required = false;
  // Why this rank could not load at all (it still joins verification, so that every
  // rank learns the reason instead of waiting for a rank that never arrives).
  std::vector<std::string> failures;
  uint64_t direct_bytes = 0;           // bytes that arrived, read directly
  uint64_t streamed_bytes = 0;         // bytes that arrived, streamed
  uint64_t fanout_received_bytes = 0;  // bytes other ranks read and sent here
  uint64_t fanout_sent_bytes = 0;      // bytes this rank read and sent, per receiver
  // What fan-out could not do and what this rank did instead ("fan-out over ranks 0, 1, 2, 3 stopped
  // at piece 5 of 9: ...; 4 pieces read from storage instead").
  std::vector<std::string> fanout_notes;
  std::map<std::string, uint64_t> streamed_bytes_by_node;  // the same, by the node that sent them
  absl::Time started;                                      // when the plan was received
  double seconds = 0;                                      // plan received -> every byte in place
  uint64_t rss_before_bytes = 0;                           // resident memory just before allocating tensors
  uint64_t rss_peak_bytes = 0;                             // the process's peak resident memory after loading
};

absl::StatusOr<RankLoad> LoadRank(const LoadOptions& options);

// What `options` asked for, in words: "tp 2 x pp 1, 4 ranks, to BF16".
std::string PlanLabel(const StrategyOptions& options, int world_size);

}  // namespace metaload

#endif  // METALOAD_CLIENT_LOAD_RANK_LOADER_H_
