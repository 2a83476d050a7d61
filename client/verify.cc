#include "client/verify.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/nccl_allreduce.h"
#include "client/torch_glue.h"
#include "planner/status_macros.h"

namespace metaload {
namespace {

// Each rank owns one slot: 8 bytes of count (little endian), then its findings as text,
// newline-separated, cut with "…" if longer than the slot. 4 KiB x 1,024 ranks = 4 MiB.
constexpr size_t kSlotBytes = 4096;
constexpr size_t kCountBytes = 8;

void WriteSlot(uint8_t* slot, int64_t count, const std::vector<std::string>& findings) {
  for (size_t i = 0; i < kCountBytes; ++i) slot[i] = static_cast<uint8_t>(static_cast<uint64_t>(count) >> (8 * i));
  std::string text;
  for (const std::string& f : findings) absl::StrAppend(&text, f, "\n");
  size_t room = kSlotBytes - kCountBytes - 1;
  if (text.size() > room) text = absl::StrCat(text.substr(0, room - 32), "\n... (more findings cut)\n");
  std::memcpy(slot + kCountBytes, text.data(), text.size());
}

void ReadSlot(const uint8_t* slot, int rank, VerifyOutcome* out) {
  uint64_t count = 0;
  for (size_t i = 0; i < kCountBytes; ++i) count |= static_cast<uint64_t>(slot[i]) << (8 * i);
  out->bad_tensor_count += static_cast<int64_t>(count);
  const char* text = reinterpret_cast<const char*>(slot + kCountBytes);
  std::string findings(text, strnlen(text, kSlotBytes - kCountBytes));
  for (absl::string_view line : absl::StrSplit(findings, '\n', absl::SkipEmpty())) {
    out->findings.push_back(absl::StrCat("rank ", rank, ": ", line));
  }
}

}  // namespace

std::vector<std::string> LocalFindings(const RankLoad& load) {
  std::vector<std::string> findings = load.failures;
  for (const LoadedTensor& t : load.tensors) {
    if (!t.tensor.defined()) {
      findings.push_back(absl::StrCat(t.name, " was never allocated"));
    } else if (t.tensor.is_meta()) {
      findings.push_back(absl::StrCat(t.name, " is still on meta"));
    } else if (!t.filled) {
      findings.push_back(absl::StrCat(t.name, " was not filled: ", t.error));
    }
  }
  return findings;
}

absl::StatusOr<VerifyOutcome> VerifyAcrossRanks(const RankLoad& load, const VerifyOptions& options) {
  std::vector<std::string> mine = LocalFindings(load);
  if (load.world_size < 1 || load.rank < 0 || load.rank >= load.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", load.rank, " is outside world size ", load.world_size));
  }
  const int world = load.world_size;
  std::vector<uint8_t> slots(static_cast<size_t>(world) * kSlotBytes, 0);
  WriteSlot(slots.data() + static_cast<size_t>(load.rank) * kSlotBytes, static_cast<int64_t>(mine.size()), mine);

  VerifyOutcome outcome;
  c10::intrusive_ptr<c10d::Store> store;
  ML_RETURN_IF_ERROR(CallTorch(absl::StrCat("rendezvous at ", options.master_addr, ":", options.master_port), [&] {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(options.master_port);
    store_options.isServer = load.rank == 0;
    store_options.numWorkers = world;
    store_options.waitWorkers = false;
    store_options.timeout = absl::ToChronoMilliseconds(options.timeout);
    auto tcp = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);
    store = c10::make_intrusive<c10d::PrefixStore>(absl::StrCat(options.key_prefix, "/verify"), tcp);
  }));

  bool use_nccl = absl::StartsWith(load.device, "cuda");
  if (use_nccl) {
    outcome.backend = "nccl";
    int device_index = 0;
    if (size_t colon = load.device.find(':'); colon != std::string::npos) {
      device_index = std::atoi(load.device.c_str() + colon + 1);
    }
    ML_RETURN_IF_ERROR(NcclSumBytes(
        absl::MakeSpan(slots), load.rank, world, device_index,
        [&](const std::string& key, const std::string& value) {
          store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
        },
        [&](const std::string& key) {
          std::vector<uint8_t> v = store->get(key);
          return std::string(v.begin(), v.end());
        }));
  } else {
    outcome.backend = "gloo";
    ML_RETURN_IF_ERROR(CallTorch("gloo all-reduce of verification results", [&] {
      auto gloo_options = c10d::ProcessGroupGloo::Options::create(absl::ToChronoMilliseconds(options.timeout));
      // This rank's own interface, chosen as torch.distributed does: GLOO_SOCKET_IFNAME when
      // set, else the address this host's name resolves to (loopback as the last resort).
      // (MASTER_ADDR is where the store is, not an address this rank can bind on other hosts.)
      const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
      gloo_options->devices.push_back(ifname != nullptr && *ifname != '\0'
                                          ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                                          : c10d::ProcessGroupGloo::createDefaultDevice());
      auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, load.rank, world, gloo_options);
      std::vector<at::Tensor> tensors{torch::from_blob(slots.data(), {static_cast<int64_t>(slots.size())},
                                                       torch::TensorOptions().dtype(torch::kByte))};
      group->allreduce(tensors)->wait();
    }));
  }
  for (int r = 0; r < world; ++r) ReadSlot(slots.data() + static_cast<size_t>(r) * kSlotBytes, r, &outcome);
  return outcome;
}

}  // namespace metaload
