// metaload._native's verification: the exchange of rank reports (client/verify/exchange.h)
// over the caller's torch.distributed process group, as a c10d::ProcessGroup.
#ifndef METALOAD_CLIENT_PYTHON_NATIVE_VERIFY_BINDING_H_
#define METALOAD_CLIENT_PYTHON_NATIVE_VERIFY_BINDING_H_

#include <pybind11/pybind11.h>

namespace metaload {

// Adds exchange_reports and DEFAULT_VERIFY_TIMEOUT_S to `m`.
void RegisterVerify(pybind11::module_& m);

}  // namespace metaload

#endif  // METALOAD_CLIENT_PYTHON_NATIVE_VERIFY_BINDING_H_
