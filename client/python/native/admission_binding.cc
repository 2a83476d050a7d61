#include "client/python/native/admission_binding.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>

#include "planner/doctor/init_budget.h"

namespace py = pybind11;

namespace metaload {

void RegisterAdmission(py::module_& m) {
  // None when a policy may initialize `initialized` of the module's `total` tensors; else the
  // refusal in the package's words (init_missing=...). `catch_all`: init_missing is one policy
  // string (`policy`) for whatever is missing, not {name or pattern: policy}. Negative counts
  // are refused by the conversion (TypeError).
  m.def(
      "init_budget_refusal",
      [](uint64_t initialized, uint64_t total, bool catch_all, const std::string& policy,
         const std::string& example) -> std::optional<std::string> {
        const InitBudgetVerdict verdict =
            JudgeInitBudget(initialized, total, catch_all ? InitScope::kCatchAll : InitScope::kNamed);
        if (verdict == InitBudgetVerdict::kAllowed) return std::nullopt;
        return InitBudgetRefusal(verdict, initialized, total, {InitSurface::kPython, policy, example});
      },
      py::arg("initialized"), py::arg("total"), py::kw_only(), py::arg("catch_all"), py::arg("policy"),
      py::arg("example"));
}

}  // namespace metaload
