#include "client/verify/rendezvous.h"

#include <cstdlib>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/strings/str_cat.h"
#include "libtorch/torch_glue.h"
#include "util/status_macros.h"

namespace metaload {

absl::StatusOr<RendezvousStore> ConnectRendezvous(int rank, int world, const VerificationOptions& options) {
  RendezvousStore store;
  ML_RETURN_IF_ERROR(
      CallTorch(absl::StrCat("rendezvous at ", options.master_addr, ":", options.master_port), [&] {
        c10d::TCPStoreOptions store_options;
        store_options.port = static_cast<uint16_t>(options.master_port);
        store_options.isServer = options.host_store && rank == 0;
        store_options.numWorkers = world;
        store_options.waitWorkers = false;
        store_options.timeout = absl::ToChronoMilliseconds(options.timeout);
        store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);
      }));
  return store;
}

RendezvousStore Scoped(const RendezvousStore& store, const VerificationOptions& options,
                       const std::string& scope) {
  return c10::make_intrusive<c10d::PrefixStore>(absl::StrCat(options.key_prefix, "/", scope), store);
}

absl::StatusOr<GlooGroup> NewGlooGroup(const RendezvousStore& store, int rank, int world,
                                       absl::Duration timeout, GlooConnect connect) {
  GlooGroup group;
  ML_RETURN_IF_ERROR(CallTorch("setting up a gloo group", [&] {
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(absl::ToChronoMilliseconds(timeout));
    // This rank's own interface, chosen as torch.distributed does: GLOO_SOCKET_IFNAME when
    // set, else the address this host's name resolves to (loopback as the last resort).
    // (MASTER_ADDR is where the store is, not an address this rank can bind on other hosts.)
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    const bool lazy = connect == GlooConnect::kOnFirstUse;
    gloo_options->devices.push_back(ifname != nullptr && *ifname != '\0'
                                        ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname, lazy)
                                        : c10d::ProcessGroupGloo::createDefaultDevice(lazy));
    group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, gloo_options);
  }));
  return group;
}

}  // namespace metaload
