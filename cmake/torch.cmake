# LibTorch from the PyPI `torch` wheel in the project's virtual environment.
#
# We describe the wheel's LibTorch as an imported target by hand instead of calling
# find_package(Torch): the wheel's TorchConfig.cmake insists on finding a CUDA toolkit
# of the exact version the wheel was built with, which a build host without that
# toolkit (or with another one) does not have. We only need headers and three
# libraries; CUDA kernels come precompiled inside libtorch_cuda.so.
# METALOAD_PYTHON: the interpreter whose torch we build against (and for which the Python
# extension is built): the checkout's .venv, or under `pip install ./` the installing one.
if(SKBUILD)
  set(_default_python "${Python_EXECUTABLE}")
else()
  set(_default_python "${CMAKE_SOURCE_DIR}/.venv/bin/python")
endif()
set(METALOAD_PYTHON "${_default_python}" CACHE FILEPATH "Python whose torch wheel provides LibTorch")
if(NOT METALOAD_TORCH_PREFIX)
  set(_venv_python "${METALOAD_PYTHON}")
  if(NOT EXISTS "${_venv_python}")
    message(FATAL_ERROR "No ${_venv_python}: run scripts/setup.sh first (it creates the virtual environment with torch)")
  endif()
  execute_process(
    COMMAND "${_venv_python}" -c "import os, torch; print(os.path.dirname(torch.__file__)); print(int(torch.compiled_with_cxx11_abi())); print(torch.__version__); import importlib.metadata as m; print(m.version('torch'))"
    OUTPUT_VARIABLE _torch_info OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _torch_rc)
  if(NOT _torch_rc EQUAL 0)
    message(FATAL_ERROR "${_venv_python} cannot import torch: run scripts/setup.sh (or install torch into that environment)")
  endif()
  string(REPLACE "\n" ";" _torch_info "${_torch_info}")
  list(GET _torch_info 0 METALOAD_TORCH_PREFIX)
  list(GET _torch_info 1 METALOAD_TORCH_CXX11_ABI)
  list(GET _torch_info 2 METALOAD_TORCH_VERSION)
  # The installed distribution's version, as pip and importlib.metadata name it (2.15.0 where
  # torch.__version__ says 2.15.0+cu132): what the Python package records and checks at import.
  list(GET _torch_info 3 METALOAD_TORCH_DIST_VERSION)
else()
  set(METALOAD_TORCH_CXX11_ABI 1)
  set(METALOAD_TORCH_VERSION unknown)
  set(METALOAD_TORCH_DIST_VERSION "")
endif()
message(STATUS "LibTorch ${METALOAD_TORCH_VERSION} at ${METALOAD_TORCH_PREFIX}")

set(_torch_lib "${METALOAD_TORCH_PREFIX}/lib")
# metaload_torch_cpu: headers and the CPU libraries. Enough for meta tensors, CPU tensors and
# c10d/Gloo. metad links only this: loading libtorch_cuda.so (and through it cuBLAS, cuDNN,
# ...) costs a process hundreds of MB of resident memory that a daemon never uses.
add_library(metaload_torch_cpu INTERFACE)
target_include_directories(metaload_torch_cpu SYSTEM INTERFACE
  "${METALOAD_TORCH_PREFIX}/include"
  "${METALOAD_TORCH_PREFIX}/include/torch/csrc/api/include")
target_compile_definitions(metaload_torch_cpu INTERFACE
  _GLIBCXX_USE_CXX11_ABI=${METALOAD_TORCH_CXX11_ABI} USE_C10D_GLOO)
target_link_libraries(metaload_torch_cpu INTERFACE "${_torch_lib}/libtorch_cpu.so" "${_torch_lib}/libc10.so")

# metaload_torch: adds CUDA for ranks. --no-as-needed keeps libtorch_cuda.so (through
# libtorch.so) loaded even though we call nothing in it directly: it registers the CUDA
# kernels and allocator that CUDA tensors need.
add_library(metaload_torch INTERFACE)
target_link_libraries(metaload_torch INTERFACE metaload_torch_cpu
  "-Wl,--no-as-needed" "${_torch_lib}/libtorch.so" "-Wl,--as-needed")
if(EXISTS "${_torch_lib}/libc10_cuda.so")
  target_link_libraries(metaload_torch INTERFACE "${_torch_lib}/libc10_cuda.so")
  set(METALOAD_TORCH_HAS_CUDA ON)
endif()
# The wheel's libraries find their CUDA/NCCL siblings through their own RPATH.
set(CMAKE_BUILD_RPATH "${_torch_lib}")
set(CMAKE_INSTALL_RPATH "${_torch_lib}")
