// metaload/verify.h: proof across ranks, after loading, that no rank holds a tensor still on
// meta, never allocated or not filled, that every rank could load, and that all loaded the same
// plan. ONE all-reduce (Gloo for CPU ranks, NCCL for CUDA ranks) gives every rank every other
// rank's report, so that every rank fails naming the same tensors and ranks.
//
//   absl::StatusOr<metaload::Verdict> verdict =
//       metaload::VerifyAcrossRanks(*load, {.master_addr = "10.0.0.1", .master_port = 29500});
//   if (!verdict.ok()) return verdict.status();         // this rank is outside the world
//   if (!verdict->ok) { log(verdict->summary); for (auto& f : verdict->findings) log(f); }
//
// Every rank of the world must call it. Rendezvous goes through a c10d TCPStore at
// master_addr:master_port, hosted by rank 0 (or, with host_store false, one that exists:
// torchrun's agent's). A rank that never comes is named after `timeout` instead of hanging the
// others. Gloo binds each rank on GLOO_SOCKET_IFNAME when set, else on its host name's address.
//
// Thread-safety: one call per rank at a time (it is a collective); reentrant otherwise.
#ifndef METALOAD_INCLUDE_METALOAD_VERIFY_H_
#define METALOAD_INCLUDE_METALOAD_VERIFY_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "metaload/load.h"

namespace metaload {

struct VerificationOptions {
  // Where the rendezvous store is (rank 0's host). Default: 127.0.0.1:29500.
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // For the rendezvous and the all-reduce. Default: 5 minutes.
  absl::Duration timeout = absl::Minutes(5);
  // Distinguishes several verifications on one store. Default: "metaload".
  std::string key_prefix = "metaload";
  // Rank 0 hosts the store; false: every rank connects to one that exists (torchrun's agent's).
  // Default: true.
  bool host_store = true;
  // The device the rank was asked to load onto: it picks the backend, whether or not the load
  // succeeded. Default "": LoadedRank::device(), or for held tensors the first one's device.
  std::string device;
  // Fail (Verdict::ok false) unless every tensor's content is proven (Verdict::proven), not only
  // when something is on meta, unfilled or differs from its digest. Default: false.
  bool require_proof = false;
};

// The same verdict on every rank.
struct Verdict {
  // Nothing left on meta or unfilled, every rank loaded, every rank loaded the same plan.
  bool ok = false;
  // When !ok, the headline: "2 tensors on meta or unfilled on rank 1; rank 3 could not load".
  std::string summary;
  // "gloo" or "nccl".
  std::string backend;
  // Tensors left, over all ranks, and the ranks holding them.
  int64_t bad_tensor_count = 0;
  std::vector<int> bad_ranks;
  // Ranks that could not load at all, and ranks that did not arrive within the timeout.
  std::vector<int> failed_ranks;
  std::vector<int> never_joined;
  // One line per distinct plan when ranks loaded different ones; empty when they agree.
  std::vector<std::string> plan_mismatch;
  // One line per finding, by rank: "rank 2: model.norm.weight: still on meta"; a tensor whose
  // bytes differ from its registered digest is one ("...: bytes differ from the digest ...").
  std::vector<std::string> findings;
  // Every tensor's content proven (docs/integrity.md): every stored tensor checked against its
  // registered digest (whatever split the ranks held it in), every other computed by a rule;
  // nothing read without a digest, unproven, kept as it was, initialized by policy or filled by
  // the caller's own code.
  bool proven = false;
  // What was proven and what was not, in one line: "content proven: 291 stored tensors checked
  // against their registered fast digests; counted on each rank holding one: 64 buffers computed".
  std::string content;
  // Each stored tensor the digests could not check, and why: "rank 1: lm_head.weight: unproven: ...".
  std::vector<std::string> unproven;
};

// Errors only for a rank outside the world; everything that went wrong between ranks (a rank
// that never came, disagreeing backends, a communication failure) is in the verdict.
absl::StatusOr<Verdict> VerifyAcrossRanks(const LoadedRank& load, const VerificationOptions& options = {});

// A tensor a rank filled some other way (Materialize, its own code): a finding when undefined,
// on meta, or not `filled`; filled, nothing proves its content (Verdict::proven is false).
struct HeldTensor {
  std::string name;
  at::Tensor tensor;
  bool filled = true;
  std::string error;  // why not filled
};

// The same for tensors not loaded by LoadRank; no plan is compared.
absl::StatusOr<Verdict> VerifyAcrossRanks(int rank, int world_size, const std::vector<HeldTensor>& tensors,
                                          const VerificationOptions& options = {});

}  // namespace metaload

#endif  // METALOAD_INCLUDE_METALOAD_VERIFY_H_
