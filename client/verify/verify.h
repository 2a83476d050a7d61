// Verification across ranks for `metactl load` and the library: after loading, every rank
// reports its tensors that are still on meta, were never allocated, or were not filled, the
// digest of the plan it loaded and why it could not load at all (if so) (ReportOf), and the
// exchange every entry point shares (client/verify/exchange.h) gives every rank every other
// rank's report. Every rank then fails, naming the same tensors and ranks, if any tensor is
// left, any rank could not load, or the ranks loaded different plans.
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
#include "client/verify/outcome.h"
#include "client/verify/rank_report.h"
#include "metaload/verify.h"

namespace metaload {

// The public options (include/metaload/verify.h) serve inside too: one list of knobs. A device
// left "" is the load's own (RankLoad::device).
using VerifyOptions = VerificationOptions;

// This rank's own report (no communication): its findings (the load's failures, about the
// whole rank, then each tensor that is not real and filled), plan, the proofs of the stored
// tensors it read (client/verify/tensor_proof.h) and how many it initialized or computed.
RankReport ReportOf(const RankLoad& load);

// Errors only for a rank outside the world; everything that went wrong between ranks (a
// rank that never came, disagreeing backends, a communication failure) is in the outcome.
absl::StatusOr<VerifyOutcome> VerifyAcrossRanks(const RankLoad& load, const VerifyOptions& options);
// The same over a store this rank already connected to (ConnectRendezvous, rendezvous.h): the
// one fan-out used, so that rank 0 hosts one store; nullopt: connects as above.
absl::StatusOr<VerifyOutcome> VerifyAcrossRanks(const RankLoad& load, const VerifyOptions& options,
                                                const std::optional<RendezvousStore>& connected);

}  // namespace metaload

#endif  // METALOAD_CLIENT_VERIFY_VERIFY_H_
