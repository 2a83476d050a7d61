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
