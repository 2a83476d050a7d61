#include "client/python/native/verify_binding.h"

#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>  // c10::intrusive_ptr holders: torch's ProcessGroup objects

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/python/native/raise.h"
#include "client/read/knobs.h"
#include "client/verify/exchange.h"
#include "client/verify/group_sum.h"
#include "libtorch/torch_glue.h"
#include "metaload/verify.h"

namespace py = pybind11;

namespace metaload {
namespace {

// A Python process group (None: this process alone) as the exchange's sums: rank, size and
// backend, and sums on tensors made here, with no Python object, so that Gloo's worker may free
// them on its thread at any time, even while the interpreter exits (docs/python.md).
struct PythonGroup {
  int rank = 0;
  int world = 1;
  std::string backend;
  ExchangeSums sums;
};

PythonGroup GroupOf(const py::object& group, const std::string& device, absl::Duration timeout) {
  PythonGroup out;
  if (group.is_none()) return out;
  auto pg = py::cast<c10::intrusive_ptr<c10d::ProcessGroup>>(group);
  out.rank = pg->getRank();
  out.world = pg->getSize();
  out.backend = pg->getBackendName();
  at::Device at_device = at::kCPU;
  if (absl::Status s = CallTorch("the collective's device", [&] { at_device = at::Device(device); });
      !s.ok()) {
    Raise(absl::InvalidArgumentError(s.message()));
  }
  out.sums = SumsOverGroup(pg, GroupSumOptions{.device = at_device,
                                               .timeout = timeout,
                                               // Ctrl-C: the exception is left set; raised by the caller.
                                               .interrupted = [] {
                                                 py::gil_scoped_acquire gil;
                                                 return PyErr_CheckSignals() != 0;
                                               }});
  return out;
}

// The most values one sum_int64 call takes, the largest group and the largest value's magnitude:
// with all three, every sum below is exact in 64 bits (the lengths' check: 2^20 x (2^20)^2 =
// 2^60; the values: 2^20 x 2^42 = 2^62).
constexpr size_t kMaxSummedValues = size_t{1} << 20;
constexpr int kMaxSummingRanks = 1 << 20;
constexpr int64_t kMaxSummedMagnitude = int64_t{1} << 42;

// Every rank's `values` summed element-wise (exactly, as 64-bit integers), on tensors of the
// core's. Checked first, by one sum of (n, n^2, values out of range), alike on every rank:
// FailedPrecondition when the ranks pass different lengths (equal exactly when world x sum(n^2)
// == sum(n)^2), InvalidArgument when any rank passes a value whose sum could leave 64 bits.
std::vector<int64_t> SumBinding(const py::object& group, const std::string& device,
                                std::vector<int64_t> values, const std::string& what, double timeout_s) {
  const absl::Duration timeout = OrRaise(TimeoutFromSeconds("timeout_s", timeout_s));
  if (values.size() > kMaxSummedValues) {
    Raise(absl::InvalidArgumentError(absl::StrCat(what, ": ", values.size(), " values, more than the ",
                                                  kMaxSummedValues, " one sum takes")));
  }
  const PythonGroup g = GroupOf(group, device, timeout);
  if (g.world <= 1) return values;
  if (g.world > kMaxSummingRanks) {
    Raise(absl::InvalidArgumentError(
        absl::StrCat(what, ": a group of ", g.world, " ranks, more than ", kMaxSummingRanks)));
  }
  absl::Status status;
  {
    py::gil_scoped_release release;
    const auto n = static_cast<int64_t>(values.size());
    const auto out_of_range = static_cast<int64_t>(std::count_if(values.begin(), values.end(), [](int64_t v) {
      return v < -kMaxSummedMagnitude || v > kMaxSummedMagnitude;
    }));
    int64_t lengths[3] = {n, n * n, out_of_range};
    status = g.sums.int64(absl::MakeSpan(lengths), what);
    if (status.ok() && lengths[2] != 0) {
      status = absl::InvalidArgumentError(absl::StrCat(what,
                                                       ": values beyond +/-2^42, where a sum over the group "
                                                       "could overflow: ",
                                                       lengths[2], " between the ", g.world,
                                                       " ranks (this rank: ", out_of_range, ")"));
    }
    if (status.ok() &&
        static_cast<__int128>(g.world) * lengths[1] != static_cast<__int128>(lengths[0]) * lengths[0]) {
      status = absl::FailedPreconditionError(absl::StrCat(what, ": the ", g.world, " ranks pass ", lengths[0],
                                                          " values between them, not the same number each "
                                                          "(this rank: ",
                                                          n, "; each rank another model?)"));
    }
    if (status.ok() && n > 0) status = g.sums.int64(absl::MakeSpan(values), what);
  }
  if (PyErr_Occurred() != nullptr) throw py::error_already_set();
  if (!status.ok()) Raise(status);
  return values;
}

// What Python hands in; what it gets back (metaload/_core/verify.py turns it into its result or
// MetaTensorError).
py::dict ExchangeBinding(const py::object& group, const std::string& device,
                         const std::vector<std::tuple<std::string, std::string>>& findings,
                         const std::vector<std::string>& summary, int64_t checked, int64_t unproven,
                         bool could_not_load, const std::string& plan_digest, bool refusal, double timeout_s,
                         const std::vector<TensorProof>& proofs, int64_t initialized, int64_t computed) {
  const absl::Duration timeout = OrRaise(TimeoutFromSeconds("verify_timeout_s", timeout_s));
  if (checked < 0 || unproven < 0 || unproven > checked || initialized < 0 || computed < 0) {
    Raise(absl::InvalidArgumentError(absl::StrCat("counts ", checked, " checked, ", unproven, " unproven, ",
                                                  initialized, " initialized, ", computed, " computed")));
  }
  RankReport mine;
  for (const auto& [tensor, why] : findings) {
    mine.findings.push_back(Finding{tensor, why});
    if (!tensor.empty()) ++mine.bad_tensor_count;
  }
  mine.summary = summary;
  mine.checked_count = checked;
  mine.unproven_count = unproven;
  mine.could_not_load = could_not_load;
  mine.plan_digest = plan_digest;
  mine.proofs = proofs;
  mine.initialized_count = initialized;
  mine.computed_count = computed;

  const PythonGroup g = GroupOf(group, device, timeout);
  absl::StatusOr<VerifyOutcome> outcome;
  {
    py::gil_scoped_release release;
    outcome = ExchangeReports(std::move(mine), g.rank, g.world, g.sums);
  }
  if (PyErr_Occurred() != nullptr) throw py::error_already_set();
  if (!outcome.ok()) Raise(outcome.status());
  outcome->backend = g.backend;
  py::list found;
  for (const RankedFinding& f : outcome->findings) {
    found.append(py::make_tuple(f.finding.tensor, f.rank, f.finding.why));
  }
  py::dict out;
  out["ok"] = outcome->ok();
  out["message"] = outcome->ok() ? std::string()
                                 : outcome->Message(g.world, refusal ? ExchangeKind::kRefusal
                                                                     : ExchangeKind::kVerification);
  out["findings"] = found;
  out["checked"] = outcome->checked_count;
  out["unproven"] = outcome->unproven_count;
  // What the content proofs showed (client/verify/outcome.h): said the way metactl load says it.
  out["proven"] = outcome->proven();
  out["content"] = outcome->ContentLine();
  out["unproven_lines"] = outcome->UnprovenLines();
  py::dict stored;
  stored["checked"] = outcome->stored_checked;
  stored["no_digest"] = outcome->stored_no_digest;
  stored["unproven"] = outcome->stored_unproven;
  stored["mismatch"] = outcome->stored_mismatch;
  out["stored"] = stored;
  out["digest_kind"] = outcome->digest_kind;
  out["notes"] = outcome->notes;
  out["rank"] = g.rank;
  out["world_size"] = g.world;
  return out;
}

}  // namespace

void RegisterVerify(py::module_& m) {
  // How long every rank waits for the others by default, in metactl load and the package alike.
  m.attr("DEFAULT_VERIFY_TIMEOUT_S") = absl::ToDoubleSeconds(VerificationOptions{}.timeout);
  m.def("exchange_reports", &ExchangeBinding, py::arg("group").none(true), py::kw_only(), py::arg("device"),
        py::arg("findings"), py::arg("summary"), py::arg("checked"), py::arg("unproven"),
        py::arg("could_not_load"), py::arg("plan_digest"), py::arg("refusal"), py::arg("timeout_s"),
        py::arg("proofs") = std::vector<TensorProof>{}, py::arg("initialized") = 0, py::arg("computed") = 0);
  m.def("sum_int64", &SumBinding, py::arg("group").none(true), py::kw_only(), py::arg("device"),
        py::arg("values"), py::arg("what"), py::arg("timeout_s"));
}

}  // namespace metaload
