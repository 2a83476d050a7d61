#include "client/verify/verify.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/load/device.h"
#include "client/verify/nccl_allreduce.h"
#include "client/verify/rendezvous.h"
#include "client/verify/verify_slots.h"
#include "libtorch/torch_glue.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

using Store = RendezvousStore;

// "1, 3" or "0-3".
std::string RankList(const std::vector<int>& ranks) {
  if (ranks.size() > 2 && ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size())) {
    return absl::StrCat(ranks.front(), "-", ranks.back());
  }
  return absl::StrJoin(ranks, ", ");
}

std::string Plural(size_t n, const char* one, const char* many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

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
    outcome->findings.push_back(absl::StrCat(outcome->never_joined.size() == 1 ? "rank " : "ranks ",
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

absl::Status GlooSum(const Store& store, int rank, int world, std::vector<uint8_t>& slots,
                     absl::Duration timeout) {
  ML_ASSIGN_OR_RETURN(GlooGroup group, NewGlooGroup(store, rank, world, timeout));
  return CallTorch("gloo all-reduce of verification results", [&] {
    std::vector<at::Tensor> tensors{torch::from_blob(slots.data(), {static_cast<int64_t>(slots.size())},
                                                     torch::TensorOptions().dtype(torch::kByte))};
    group->allreduce(tensors)->wait();
  });
}

// ncclCommInitRank has no timeout: every rank first checks its device and says so through the
// store; only when all can do they enter NCCL.
absl::Status NcclSum(c10d::Store& store, int rank, int world, const absl::StatusOr<int>& device_index,
                     std::vector<uint8_t>& slots, absl::Duration timeout) {
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
  return NcclSumBytes(
      absl::MakeSpan(slots), rank, world, *device_index,
      [&](const std::string& key, const std::string& value) {
        return CallTorch("publishing the NCCL id",
                         [&] { store.set(key, std::vector<uint8_t>(value.begin(), value.end())); });
      },
      [&](const std::string& key) -> absl::StatusOr<std::string> {
        std::string value;
        ML_RETURN_IF_ERROR(CallTorch("fetching the NCCL id", [&] {
          std::vector<uint8_t> v = store.get(key);
          value.assign(v.begin(), v.end());
        }));
        return value;
      });
}

// Every rank says it has read what it needs from the store; the rank hosting the store
// waits for all of them (bounded) before its process may exit and take the store with it.
void LeaveTogether(c10d::Store& store, int rank, int world, bool hosting, absl::Duration timeout) {
  (void)CallTorch("leaving the rendezvous", [&] {
    if (store.add("left", 1) == world) store.set("all_left", std::vector<uint8_t>{1});
    if (hosting) store.wait({"all_left"}, absl::ToChronoMilliseconds(std::min(timeout, absl::Seconds(30))));
  });
}

// Reads every rank's slot into the outcome.
void Tally(const std::vector<uint8_t>& slots, int world, VerifyOutcome* outcome) {
  std::map<std::string, std::vector<int>> ranks_by_plan;
  std::map<std::string, std::string> label_of;
  for (int r = 0; r < world; ++r) {
    RankReport report =
        DecodeSlot(absl::MakeConstSpan(slots.data() + static_cast<size_t>(r) * kSlotBytes, kSlotBytes));
    outcome->bad_tensor_count += report.bad_tensor_count;
    outcome->has_digests = outcome->has_digests || report.has_digests;
    outcome->digest_matched_count += report.digest_matched_count;
    outcome->digest_sliced_count += report.digest_sliced_count;
    outcome->digest_on_device_count += report.digest_on_device_count;
    if (report.bad_tensor_count > 0) outcome->bad_ranks.push_back(r);
    if (report.could_not_load) outcome->failed_ranks.push_back(r);
    if (!report.plan_digest.empty()) {
      ranks_by_plan[report.plan_digest].push_back(r);
      label_of[report.plan_digest] = report.plan_label;
    }
    for (const std::string& line : report.findings)
      outcome->findings.push_back(absl::StrCat("rank ", r, ": ", line));
  }
  if (ranks_by_plan.size() > 1) {
    for (const auto& [digest, ranks] : ranks_by_plan) {
      outcome->plan_mismatch.push_back(absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", RankList(ranks),
                                                    " loaded plan ", digest.substr(0, 12), " (",
                                                    label_of[digest], ")"));
    }
  }
}

}  // namespace

std::string VerifyOutcome::Summary(int world_size) const {
  std::vector<std::string> parts;
  if (bad_tensor_count > 0) {
    parts.push_back(absl::StrCat(Plural(static_cast<size_t>(bad_tensor_count), "tensor", "tensors"),
                                 " on meta or unfilled on ", bad_ranks.size() == 1 ? "rank " : "ranks ",
                                 RankList(bad_ranks)));
  }
  if (!failed_ranks.empty()) {
    parts.push_back(absl::StrCat(failed_ranks.size() == 1 ? "rank " : "ranks ", RankList(failed_ranks),
                                 " could not load"));
  }
  if (!never_joined.empty()) {
    parts.push_back(
        absl::StrCat(never_joined.size() == 1 ? "rank " : "ranks ", RankList(never_joined), " never joined"));
  }
  if (!plan_mismatch.empty()) {
    parts.push_back(
        "the ranks did not load the same plan: every rank must ask for the same model, strategy, "
        "options and world size");
  }
  return absl::StrCat(absl::StrJoin(parts, "; "), " (", world_size, " ranks)");
}

std::string VerifyOutcome::DigestVerdict() const {
  if (!has_digests) return "";
  std::vector<std::string> unchecked;
  if (digest_sliced_count > 0) {
    unchecked.push_back(absl::StrCat(
        Plural(static_cast<size_t>(digest_sliced_count), "sliced tensor", "sliced tensors"), " not checked"));
  }
  if (digest_on_device_count > 0) {
    unchecked.push_back(absl::StrCat(Plural(static_cast<size_t>(digest_on_device_count), "tensor", "tensors"),
                                     " on CUDA not checked"));
  }
  return absl::StrCat("; bytes of ", Plural(static_cast<size_t>(digest_matched_count), "tensor", "tensors"),
                      " match the registered digests",
                      unchecked.empty() ? "" : absl::StrCat(" (", absl::StrJoin(unchecked, ", "), ")"));
}

void CountDigestChecks(const RankLoad& load, RankReport* report) {
  report->has_digests = load.has_digests;
  for (const LoadedTensor& t : load.tensors) {
    if (!t.filled) continue;
    switch (t.digest) {
      case DigestCheck::kMatched:
        ++report->digest_matched_count;
        break;
      case DigestCheck::kSliced:
        ++report->digest_sliced_count;
        break;
      case DigestCheck::kOnDevice:
        ++report->digest_on_device_count;
        break;
      case DigestCheck::kNone:
        break;
    }
  }
}

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
  return VerifyAcrossRanks(load, options, std::nullopt);
}

absl::StatusOr<VerifyOutcome> VerifyAcrossRanks(const RankLoad& load, const VerifyOptions& options,
                                                const std::optional<RendezvousStore>& connected) {
  if (load.world_size < 1 || load.rank < 0 || load.rank >= load.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", load.rank, " is outside world size ", load.world_size));
  }
  const int world = load.world_size;
  RankReport mine;
  mine.findings = LocalFindings(load);
  mine.bad_tensor_count = static_cast<int64_t>(mine.findings.size() - load.failures.size());
  mine.could_not_load = !load.failures.empty();
  mine.plan_digest = load.plan_digest;
  mine.plan_label = load.plan_label;
  CountDigestChecks(load, &mine);
  std::vector<uint8_t> slots(static_cast<size_t>(world) * kSlotBytes, 0);
  EncodeSlot(mine, absl::MakeSpan(slots.data() + static_cast<size_t>(load.rank) * kSlotBytes, kSlotBytes));

  VerifyOutcome outcome;
  const std::string& device = options.device.empty() ? load.device : options.device;
  outcome.backend = NamesCuda(device) ? "nccl" : "gloo";
  absl::StatusOr<Store> store =
      connected.has_value() ? *connected : ConnectRendezvous(load.rank, world, options);
  if (store.ok()) store = Scoped(*store, options, "verify");
  if (!store.ok()) {
    if (load.rank == 0 || !options.host_store) return store.status();
    // Rank 0 hosts the store: nobody answering there means rank 0 never came.
    outcome.never_joined.push_back(0);
    outcome.findings.push_back(absl::StrCat("rank 0 (it hosts the rendezvous at ", options.master_addr, ":",
                                            options.master_port, ") never joined within ",
                                            Seconds(options.timeout)));
    return outcome;
  }
  ML_RETURN_IF_ERROR(JoinAll(**store, load.rank, world, outcome.backend, options.timeout, &outcome));
  if (!outcome.never_joined.empty()) return outcome;  // the missing ranks would never leave
  absl::Status summed;
  if (outcome.plan_mismatch.empty()) {
    summed = outcome.backend == "nccl"
                 ? NcclSum(**store, load.rank, world, CudaIndex(device, load.rank), slots, options.timeout)
                 : GlooSum(*store, load.rank, world, slots, options.timeout);
  }
  LeaveTogether(**store, load.rank, world, options.host_store && load.rank == 0, options.timeout);
  ML_RETURN_IF_ERROR(summed);
  if (outcome.plan_mismatch.empty()) Tally(slots, world, &outcome);
  return outcome;
}

}  // namespace metaload
