// metaload._native's admission rules: the init budget (planner/doctor/init_budget.h) that
// metaload._core.strict.account applies to a module, the same rule `metactl register` applies to a
// skeleton.
#ifndef METALOAD_CLIENT_PYTHON_NATIVE_ADMISSION_BINDING_H_
#define METALOAD_CLIENT_PYTHON_NATIVE_ADMISSION_BINDING_H_

#include <pybind11/pybind11.h>

namespace metaload {

// Adds init_budget_refusal to `m`.
void RegisterAdmission(pybind11::module_& m);

}  // namespace metaload

#endif  // METALOAD_CLIENT_PYTHON_NATIVE_ADMISSION_BINDING_H_
