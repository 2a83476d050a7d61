// Verification across ranks: after loading, every rank counts its tensors that are still
// on meta, were never allocated, or were not filled, and writes the names and reasons into
// its own slot of a buffer; ONE all-reduce (sum) over all ranks then gives every rank every
// other rank's findings. Gloo for CPU ranks, NCCL for CUDA ranks; rendezvous through a
// c10d TCPStore at MASTER_ADDR:MASTER_PORT (rank 0 hosts it), as torchrun sets them. Gloo
// binds each rank on GLOO_SOCKET_IFNAME when set, else on its host name's address.
#ifndef METALOAD_CLIENT_VERIFY_H_
#define METALOAD_CLIENT_VERIFY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/rank_loader.h"

namespace metaload {

struct VerifyOptions {
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  absl::Duration timeout = absl::Minutes(5);  // for the rendezvous and the all-reduce
  std::string key_prefix = "metaload";        // distinguishes several loads on one store
};

struct VerifyOutcome {
  int64_t bad_tensor_count = 0;       // over all ranks
  std::vector<std::string> findings;  // "rank 2: model.norm.weight is still on meta", by rank
  std::string backend;                // "gloo" or "nccl"
};

// This rank's own findings (no communication).
std::vector<std::string> LocalFindings(const RankLoad& load);

// Errors only for the communication itself (Unavailable: a rank never arrived).
absl::StatusOr<VerifyOutcome> VerifyAcrossRanks(const RankLoad& load, const VerifyOptions& options);

}  // namespace metaload

#endif  // METALOAD_CLIENT_VERIFY_H_
