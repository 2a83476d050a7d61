#include "client/verify/verify.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/load/device.h"
#include "client/verify/exchange.h"
#include "client/verify/group_sum.h"
#include "client/verify/nccl_allreduce.h"
#include "client/verify/rendezvous.h"
#include "libtorch/torch_glue.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

using Store = RendezvousStore;

std::string Seconds(absl::Duration d) { return absl::StrCat(absl::ToInt64Seconds(d), " s"); }

// The CUDA device the rank loaded onto, by the rule its load followed (client/load/device.h);
// why there is none, for its peers to learn.
absl::StatusOr<int> CudaIndex(const std::string& device, int rank) {
  absl::StatusOr<torch::Device> resolved = ResolveDevice(device, rank);
  if (!resolved.ok()) return resolved.status();
  return resolved->index();
}

// Every rank says it is here and which backend it will use; the last to arrive says all are.
// Ranks that never arrive are named; ranks that would use different backends are refused
// before entering collectives that could never meet.
absl::Status JoinAll(c10d::Store& store, int rank, int world, const std::string& backend,
                     absl::Duration timeout, VerifyOutcome* outcome) {
  bool all_joined = false;
  ML_RETURN_IF_ERROR(CallTorch("announcing this rank", [&] {
    store.set(absl::StrCat("joined/", rank), std::vector<uint8_t>(backend.begin(), backend.end()));
    store.add(absl::StrCat("backend/", backend), 1);
    if (store.add("joined", 1) == world) store.set("all_joined", std::vector<uint8_t>{1});
  }));
  absl::Status waited = CallTorch("waiting for every rank", [&] {
    store.wait({"all_joined"}, absl::ToChronoMilliseconds(timeout));
    all_joined = true;
  });
  if (!all_joined) {
    for (int r = 0; r < world; ++r) {
      bool here = true;
      if (!CallTorch("", [&] { here = store.check({absl::StrCat("joined/", r)}); }).ok()) here = false;
      if (!here) outcome->never_joined.push_back(r);
    }
    if (outcome->never_joined.empty()) return waited;  // a store failure, not a missing rank
    outcome->notes.push_back(absl::StrCat(outcome->never_joined.size() == 1 ? "rank " : "ranks ",
                                          RankList(outcome->never_joined), " never joined within ",
                                          Seconds(timeout)));
    return absl::OkStatus();
  }
  int64_t same = 0;
  ML_RETURN_IF_ERROR(
      CallTorch("reading the backends", [&] { same = store.add(absl::StrCat("backend/", backend), 0); }));
  if (same != world) {
    outcome->plan_mismatch.push_back(
        absl::StrCat(world - same, " of ", world, " ranks verify with another backend than ", backend,
                     " (--device cuda ranks use NCCL, cpu ranks Gloo): give every rank the same --device"));
  }
  return absl::OkStatus();
}

// The exchange's sums over a Gloo group of the job's store, made once for all its rounds.
absl::StatusOr<ExchangeSums> GlooSums(const Store& store, int rank, int world, absl::Duration timeout) {
  ML_ASSIGN_OR_RETURN(GlooGroup group, NewGlooGroup(store, rank, world, timeout));
  return SumsOverGroup(AsProcessGroup(group, store, c10d::ProcessGroup::BackendType::GLOO),
                       GroupSumOptions{.device = at::kCPU, .timeout = timeout});
}

// ncclCommInitRank has no timeout: every rank first checks its device and says so through the
// store; only when all can do they enter NCCL.
absl::StatusOr<ExchangeSums> NcclSums(c10d::Store& store, int rank, int world,
                                      const absl::StatusOr<int>& device_index, absl::Duration timeout) {
  const absl::Status usable = device_index.ok() ? NcclCheckDevice(*device_index) : device_index.status();
  bool all_checked = false;
  ML_RETURN_IF_ERROR(CallTorch("announcing the CUDA device", [&] {
    if (!usable.ok()) {
      const std::string why(usable.message());
      store.set(absl::StrCat("nccl_error/", rank), std::vector<uint8_t>(why.begin(), why.end()));
    }
    store.add("nccl_usable", usable.ok() ? 1 : 0);
    if (store.add("nccl_checked", 1) == world) store.set("nccl_all_checked", std::vector<uint8_t>{1});
    store.wait({"nccl_all_checked"}, absl::ToChronoMilliseconds(timeout));
    all_checked = store.add("nccl_usable", 0) == world;
  }));
  if (!all_checked) {
    std::vector<std::string> reasons;
    for (int r = 0; r < world && reasons.size() < 8; ++r) {
      (void)CallTorch("", [&] {
        if (!store.check({absl::StrCat("nccl_error/", r)})) return;
        std::vector<uint8_t> why = store.get(absl::StrCat("nccl_error/", r));
        reasons.push_back(absl::StrCat("rank ", r, ": ", std::string(why.begin(), why.end())));
      });
    }
    return absl::FailedPreconditionError(
        absl::StrCat("not every rank can take part in the NCCL all-reduce: ", absl::StrJoin(reasons, "; ")));
  }
  // Each round publishes its own NCCL id under a key of its own.
  auto round = std::make_shared<int>(0);
  auto publish_in = [&store](const std::string& scope) {
    return [&store, scope](const std::string& key, const std::string& value) {
      return CallTorch("publishing the NCCL id",
                       [&] { store.set(scope + key, std::vector<uint8_t>(value.begin(), value.end())); });
    };
  };
  auto fetch_in = [&store](const std::string& scope) {
    return [&store, scope](const std::string& key) -> absl::StatusOr<std::string> {
      std::string value;
      ML_RETURN_IF_ERROR(CallTorch("fetching the NCCL id", [&] {
        std::vector<uint8_t> v = store.get(scope + key);
        value.assign(v.begin(), v.end());
      }));
      return value;
    };
  };
  const int index = *device_index;
  ExchangeSums sums;
  sums.bytes = [=](absl::Span<uint8_t> data, const std::string&) -> absl::Status {
    const std::string scope = absl::StrCat("round", (*round)++, "/");
    return NcclSumBytes(data, rank, world, index, publish_in(scope), fetch_in(scope));
  };
  sums.int64 = [=](absl::Span<int64_t> data, const std::string&) -> absl::Status {
    const std::string scope = absl::StrCat("round", (*round)++, "/");
    return NcclSumInt64(data, rank, world, index, publish_in(scope), fetch_in(scope));
  };
  return sums;
}

// Every rank says it has read what it needs from the store; the rank hosting the store
// waits for all of them (bounded) before its process may exit and take the store with it.
void LeaveTogether(c10d::Store& store, int rank, int world, bool hosting, absl::Duration timeout) {
  (void)CallTorch("leaving the rendezvous", [&] {
    if (store.add("left", 1) == world) store.set("all_left", std::vector<uint8_t>{1});
    if (hosting) store.wait({"all_left"}, absl::ToChronoMilliseconds(std::min(timeout, absl::Seconds(30))));
  });
}

}  // namespace

RankReport ReportOf(const RankLoad& load) {
  RankReport report;
  for (const std::string& failure : load.failures) report.findings.push_back(Finding{"", failure});
  for (const LoadedTensor& t : load.tensors) {
    if (!t.tensor.defined()) {
      report.findings.push_back(Finding{t.name, "never allocated"});
    } else if (t.tensor.is_meta()) {
      report.findings.push_back(Finding{t.name, "still on meta"});
    } else if (!t.filled) {
      report.findings.push_back(Finding{t.name, absl::StrCat("not filled: ", t.error)});
    }
  }
  report.bad_tensor_count = static_cast<int64_t>(report.findings.size() - load.failures.size());
  report.could_not_load = !load.failures.empty();
  report.checked_count = static_cast<int64_t>(load.tensors.size());
  report.plan_digest = load.plan_digest;
  report.plan_label = load.plan_label;
  for (const LoadedTensor& t : load.tensors) {
    if (!t.filled) continue;
    // A dequantized value's scales are proven beside its codes.
    for (const TensorProof& scales : t.more_proofs) report.proofs.push_back(scales);
    if (t.proof.has_value()) {
      report.proofs.push_back(*t.proof);
    } else if (t.provenance.kind == Provenance::Kind::kInit) {
      ++report.initialized_count;
    } else if (t.provenance.kind == Provenance::Kind::kBuffer) {
      ++report.computed_count;
    } else if (t.provenance.kind == Provenance::Kind::kNone) {
      ++report.unproven_count;  // filled by the caller's own code: nothing proves its content
    }
  }
  return report;
}

absl::StatusOr<VerifyOutcome> VerifyAcrossRanks(const RankLoad& load, const VerifyOptions& options) {
  return VerifyAcrossRanks(load, options, std::nullopt);
}

absl::StatusOr<VerifyOutcome> VerifyAcrossRanks(const RankLoad& load, const VerifyOptions& options,
                                                const std::optional<RendezvousStore>& connected) {
  if (load.world_size < 1 || load.rank < 0 || load.rank >= load.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", load.rank, " is outside world size ", load.world_size));
  }
  const int world = load.world_size;
  VerifyOutcome joined;
  const std::string& device = options.device.empty() ? load.device : options.device;
  joined.backend = NamesCuda(device) ? "nccl" : "gloo";
  absl::StatusOr<Store> store =
      connected.has_value() ? *connected : ConnectRendezvous(load.rank, world, options);
  if (store.ok()) store = Scoped(*store, options, "verify");
  if (!store.ok()) {
    if (load.rank == 0 || !options.host_store) return store.status();
    // Rank 0 hosts the store: nobody answering there means rank 0 never came.
    joined.never_joined.push_back(0);
    joined.notes.push_back(absl::StrCat("rank 0 (it hosts the rendezvous at ", options.master_addr, ":",
                                        options.master_port, ") never joined within ",
                                        Seconds(options.timeout)));
    return joined;
  }
  ML_RETURN_IF_ERROR(JoinAll(**store, load.rank, world, joined.backend, options.timeout, &joined));
  if (!joined.never_joined.empty()) return joined;  // the missing ranks would never leave
  if (!joined.plan_mismatch.empty()) {              // backends that would never meet
    LeaveTogether(**store, load.rank, world, options.host_store && load.rank == 0, options.timeout);
    return joined;
  }
  absl::StatusOr<ExchangeSums> sums =
      joined.backend == "nccl"
          ? NcclSums(**store, load.rank, world, CudaIndex(device, load.rank), options.timeout)
          : GlooSums(*store, load.rank, world, options.timeout);
  absl::StatusOr<VerifyOutcome> outcome =
      sums.ok() ? ExchangeReports(ReportOf(load), load.rank, world, *sums) : sums.status();
  LeaveTogether(**store, load.rank, world, options.host_store && load.rank == 0, options.timeout);
  if (outcome.ok()) outcome->backend = joined.backend;
  return outcome;
}

}  // namespace metaload
