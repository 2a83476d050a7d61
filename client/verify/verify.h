// Verification across ranks: after loading, every rank counts its tensors that are still on
// meta, were never allocated, or were not filled, and writes them, the digest of the plan it
// loaded and why it could not load at all (if so) into its own slot of a buffer
// (client/verify/verify_slots.h); ONE all-reduce (sum) over all ranks then gives every rank every
// other rank's report. Every rank then fails, naming the same tensors and ranks, if any
// tensor is left, any rank could not load, or the ranks loaded different plans.
//
// Rendezvous goes through a c10d TCPStore at MASTER_ADDR:MASTER_PORT: hosted by rank 0, or,
// under torchrun (TORCHELASTIC_USE_AGENT_STORE=True), the agent's own store. Before the
// all-reduce every rank announces itself and its backend there, so that a rank that never
// comes is named ("rank 1 never joined within 20 s") instead of hanging the others, and
// ranks never enter collectives of different backends. Gloo for CPU ranks, NCCL for CUDA
// ranks — chosen by the device a rank was asked to load onto, so a CUDA rank whose load
// failed still joins its peers' NCCL all-reduce. Gloo binds each rank on
// GLOO_SOCKET_IFNAME when set, else on its host name's address.
#ifndef METALOAD_CLIENT_VERIFY_VERIFY_H_
#define METALOAD_CLIENT_VERIFY_VERIFY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/load/rank_loader.h"
#include "metaload/verify.h"

namespace metaload {

// The public options (include/metaload/verify.h) serve inside too: one list of knobs. A device
// left "" is the load's own (RankLoad::device).
using VerifyOptions = VerificationOptions;

struct VerifyOutcome {
  std::string backend;            // "gloo" or "nccl"
  int64_t bad_tensor_count = 0;   // tensors, over all ranks
  std::vector<int> bad_ranks;     // ranks holding them
  std::vector<int> failed_ranks;  // ranks that could not load at all
  std::vector<int> never_joined;  // ranks that did not arrive within the timeout
  // One line per distinct plan when ranks loaded different ones; empty when they agree.
  std::vector<std::string> plan_mismatch;
  std::vector<std::string> findings;  // "rank 2: model.norm.weight is still on meta", by rank
  // Registered digests (`register --digest`), summed over ranks: a tensor held whole by two
  // ranks counts twice. `has_digests`: some rank's plan carries digests.
  bool has_digests = false;
  int64_t digest_matched_count = 0;    // whole CPU tensors whose bytes match
  int64_t digest_sliced_count = 0;     // sliced tensors, not checked
  int64_t digest_on_device_count = 0;  // tensors read onto a CUDA device, not checked

  bool ok() const {
    return bad_tensor_count == 0 && failed_ranks.empty() && never_joined.empty() && plan_mismatch.empty();
  }
  // The headline when !ok(): "2 tensors on meta or unfilled on rank 1; rank 3 could not load".
  std::string Summary(int world_size) const;
  // What the digests proved, appended to the verdict when ok(): "; bytes of 24 tensors match
  // the registered digests (8 sliced tensors not checked)". Empty without digests.
  std::string DigestVerdict() const;
};

struct RankReport;  // client/verify/verify_slots.h

// This rank's part of the digest counts (no communication): adds them to `report`.
void CountDigestChecks(const RankLoad& load, RankReport* report);

// This rank's own findings (no communication): one line per tensor that is not real and
// filled, after the load's failures.
std::vector<std::string> LocalFindings(const RankLoad& load);

// Errors only for a rank outside the world; everything that went wrong between ranks (a
// rank that never came, disagreeing backends, a communication failure) is in the outcome.
absl::StatusOr<VerifyOutcome> VerifyAcrossRanks(const RankLoad& load, const VerifyOptions& options);
// The same over a store this rank already connected to (ConnectRendezvous, rendezvous.h): the
// one fan-out used, so that rank 0 hosts one store; nullopt: connects as above.
absl::StatusOr<VerifyOutcome> VerifyAcrossRanks(const RankLoad& load, const VerifyOptions& options,
                                                const std::optional<RendezvousStore>& connected);

}  // namespace metaload

#endif  // METALOAD_CLIENT_VERIFY_VERIFY_H_
