// How metaload._native's bindings fail: a Status becomes the package's exception of its kind
// (util/error_kind.h; metaload/_errors.py declares the classes).
#ifndef METALOAD_CLIENT_PYTHON_NATIVE_RAISE_H_
#define METALOAD_CLIENT_PYTHON_NATIVE_RAISE_H_

#include <pybind11/pybind11.h>

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "util/error_kind.h"

namespace metaload {

[[noreturn]] inline void Raise(const absl::Status& status) {
  namespace py = pybind11;
  py::object error_class = py::module_::import("metaload._errors").attr(PythonExceptionOf(KindOf(status)));
  PyErr_SetObject(error_class.ptr(), py::str(std::string(status.message())).ptr());
  throw py::error_already_set();
}

template <typename T>
T OrRaise(absl::StatusOr<T> result) {
  if (!result.ok()) Raise(result.status());
  return *std::move(result);
}

}  // namespace metaload

#endif  // METALOAD_CLIENT_PYTHON_NATIVE_RAISE_H_
