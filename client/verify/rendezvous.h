// The job's rendezvous and Gloo groups, shared by verification (verify.h) and `metactl load`'s
// fan-out (client/load/fanout.h), so that one rank hosts one store and both set up their
// groups alike.
//
//   ML_ASSIGN_OR_RETURN(RendezvousStore store, ConnectRendezvous(rank, world, options));
//   ML_ASSIGN_OR_RETURN(GlooGroup group, NewGlooGroup(Scoped(store, "verify"), rank, world, timeout));
//
// The store is a c10d TCPStore at MASTER_ADDR:MASTER_PORT: hosted by rank 0 when
// options.host_store, else (torchrun's agent) only connected to. Gloo binds each rank on
// GLOO_SOCKET_IFNAME when set, else on its host name's address.
//
// Thread-safety: c10d's stores and groups may be used from several threads.
#ifndef METALOAD_CLIENT_VERIFY_RENDEZVOUS_H_
#define METALOAD_CLIENT_VERIFY_RENDEZVOUS_H_

#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "metaload/verify.h"

namespace metaload {

using RendezvousStore = c10::intrusive_ptr<c10d::Store>;
using GlooGroup = c10::intrusive_ptr<c10d::ProcessGroupGloo>;

// The job's store (no key prefix: Scoped adds one per use).
absl::StatusOr<RendezvousStore> ConnectRendezvous(int rank, int world, const VerificationOptions& options);

// `store` seen through options.key_prefix + "/" + scope, so that uses and restarts never meet.
RendezvousStore Scoped(const RendezvousStore& store, const VerificationOptions& options,
                       const std::string& scope);

// When a Gloo group's members connect. kAllAtOnce: every pair while the group is made, which
// waits for every member (what collectives need). kOnFirstUse: each pair when a send or receive
// first uses it; making the group waits for no one, and ranks that never talk never connect
// (point-to-point use: client/load/fanout_chain.h).
enum class GlooConnect { kAllAtOnce, kOnFirstUse };

// A Gloo group of `world` members on `store` (collective: every member calls it with the same
// store scope); its collectives give up after `timeout`.
absl::StatusOr<GlooGroup> NewGlooGroup(const RendezvousStore& store, int rank, int world,
                                       absl::Duration timeout, GlooConnect connect = GlooConnect::kAllAtOnce);

}  // namespace metaload

#endif  // METALOAD_CLIENT_VERIFY_RENDEZVOUS_H_
