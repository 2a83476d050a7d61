#include "client/python/native/verify_binding.h"

#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>  // c10::intrusive_ptr holders: torch's ProcessGroup objects

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

  int rank = 0, world = 1;
  ExchangeSums sums;
  std::string backend;
  if (!group.is_none()) {
    auto pg = py::cast<c10::intrusive_ptr<c10d::ProcessGroup>>(group);
    rank = pg->getRank();
    world = pg->getSize();
    backend = pg->getBackendName();
    at::Device at_device = at::kCPU;
    if (absl::Status s = CallTorch("the collective's device", [&] { at_device = at::Device(device); });
        !s.ok()) {
      Raise(absl::InvalidArgumentError(s.message()));
    }
    sums = SumsOverGroup(pg, GroupSumOptions{.device = at_device,
                                             .timeout = timeout,
                                             // Ctrl-C: the exception is left set; raised below.
                                             .interrupted = [] {
                                               py::gil_scoped_acquire gil;
                                               return PyErr_CheckSignals() != 0;
                                             }});
  }
  absl::StatusOr<VerifyOutcome> outcome;
  {
    py::gil_scoped_release release;
    outcome = ExchangeReports(std::move(mine), rank, world, sums);
  }
  if (PyErr_Occurred() != nullptr) throw py::error_already_set();
  if (!outcome.ok()) Raise(outcome.status());
  outcome->backend = backend;
  py::list found;
  for (const RankedFinding& f : outcome->findings) {
    found.append(py::make_tuple(f.finding.tensor, f.rank, f.finding.why));
  }
  py::dict out;
  out["ok"] = outcome->ok();
  out["message"] =
      outcome->ok() ? std::string()
                    : outcome->Message(world, refusal ? ExchangeKind::kRefusal : ExchangeKind::kVerification);
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
  out["rank"] = rank;
  out["world_size"] = world;
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
}

}  // namespace metaload
