# CUDA runtime and NCCL from the toolkit's standard prefix (CUDA_HOME, else /usr/local/cuda).
# They are compiled and linked whenever found; nothing needs a GPU at run time: the code
# asks cudaGetDeviceCount and takes the CPU path when it fails.
set(_cuda_home "$ENV{CUDA_HOME}")
if(NOT _cuda_home)
  set(_cuda_home "/usr/local/cuda")
endif()
find_path(METALOAD_CUDA_INCLUDE cuda_runtime_api.h HINTS "${_cuda_home}/include" NO_DEFAULT_PATH)
find_library(METALOAD_CUDART cudart HINTS "${_cuda_home}/lib64" "${_cuda_home}/lib" NO_DEFAULT_PATH)
find_path(METALOAD_NCCL_INCLUDE nccl.h HINTS "${_cuda_home}/include" NO_DEFAULT_PATH)
find_library(METALOAD_NCCL nccl HINTS "${_cuda_home}/lib64" "${_cuda_home}/lib" NO_DEFAULT_PATH)

# One process holds one libnccl.so.2 and one libcudart.so.13. LibTorch from the wheel needs
# the NCCL and CUDA runtime it was built with (NCCL 2.30 / CUDA 13.2 for torch 2.15), newer
# than the toolkit's (NCCL 2.28 / 13.0 here): linking the toolkit's copies leaves symbols
# libtorch_cuda.so needs unresolved. So we compile against the toolkit's headers (the API we
# call exists in both) and link the wheel's libraries when it ships them.
set(_wheel_nvidia "${METALOAD_TORCH_PREFIX}/../nvidia")
if(EXISTS "${_wheel_nvidia}/nccl/lib/libnccl.so.2")
  set(METALOAD_NCCL "${_wheel_nvidia}/nccl/lib/libnccl.so.2")
  file(GLOB _wheel_cudart "${_wheel_nvidia}/cu*/lib/libcudart.so.*")
  if(_wheel_cudart)
    list(GET _wheel_cudart 0 METALOAD_CUDART)
  endif()
endif()

add_library(metaload_cuda INTERFACE)
if(METALOAD_CUDA_INCLUDE AND METALOAD_CUDART AND METALOAD_NCCL_INCLUDE AND METALOAD_NCCL)
  set(METALOAD_WITH_CUDA ON)
  message(STATUS "CUDA runtime ${METALOAD_CUDART} and NCCL ${METALOAD_NCCL}: CUDA ranks enabled")
  target_include_directories(metaload_cuda SYSTEM INTERFACE "${METALOAD_CUDA_INCLUDE}" "${METALOAD_NCCL_INCLUDE}")
  target_link_libraries(metaload_cuda INTERFACE "${METALOAD_CUDART}" "${METALOAD_NCCL}")
  target_compile_definitions(metaload_cuda INTERFACE METALOAD_WITH_CUDA=1)
else()
  set(METALOAD_WITH_CUDA OFF)
  message(STATUS "No CUDA toolkit with NCCL under ${_cuda_home}: CUDA ranks disabled")
endif()
