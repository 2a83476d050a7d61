# `cmake --install build --prefix P`: the client library for C++ launchers. P/lib/libmetaload.so,
# its public headers (and every project header they include) under P/include/metaload at the
# paths the code includes them by ("client/read/fill.h"), and the CMake package
# P/lib/cmake/metaload (metaloadConfig.cmake: `find_package(metaload)` gives metaload::client).
# Not under `pip install ./`: there client/python/ installs libmetaload.so into the package.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The API (rank_loader.h, materialize.h, verify.h and what their signatures use), the dtype
# mapping a launcher allocates destinations with (libtorch/torch_glue.h) and the status macros
# the headers' examples use; then the project headers those include. tests/integration/
# test_install.py fails if an installed header includes one missing here.
set(METALOAD_PUBLIC_HEADERS
  client/resolve/buffer_init.h client/read/daemon_client.h client/read/failover_read.h client/read/fill.h
  client/load/host_arena.h client/resolve/materialize.h client/read/provenance.h client/read/source_order.h
  client/resolve/missing_init.h client/resolve/model_view.h client/resolve/resolver.h client/load/rank_loader.h client/verify/verify.h libtorch/torch_glue.h
  util/status_macros.h
  planner/format/checkpoint.h planner/format/dtype.h planner/format/tensor_layout.h planner/plan/cluster.h
  planner/plan/plan.h planner/plan/slice.h planner/skeleton/init_policy.h planner/skeleton/skeleton.h
  planner/strategy/strategy.h util/strided_runs.h
  util/fs/file_stamp.h)
set(METALOAD_INSTALL_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}/metaload")
foreach(header ${METALOAD_PUBLIC_HEADERS})
  get_filename_component(folder "${header}" DIRECTORY)
  install(FILES "${PROJECT_SOURCE_DIR}/${header}" DESTINATION "${METALOAD_INSTALL_INCLUDEDIR}/${folder}")
endforeach()

# The installed library loads LibTorch, and the CUDA runtime and NCCL it was linked with, from
# where it was built against them: without the wheel's NCCL folder in its RUNPATH, the loader
# could pick up another libnccl.so.2 (the toolkit's), which lacks symbols libtorch_cuda.so needs.
set(_install_rpath "${METALOAD_TORCH_PREFIX}/lib")
if(METALOAD_WITH_CUDA)
  foreach(lib "${METALOAD_CUDART}" "${METALOAD_NCCL}")
    get_filename_component(folder "${lib}" DIRECTORY)
    list(APPEND _install_rpath "${folder}")
  endforeach()
endif()
set_target_properties(metaload_shared PROPERTIES INSTALL_RPATH "${_install_rpath}")
install(TARGETS metaload_shared LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}")

set(_config_dir "${CMAKE_INSTALL_LIBDIR}/cmake/metaload")
if(METALOAD_TORCH_HAS_CUDA)
  set(METALOAD_TORCH_LIBS "torch_cpu;c10;torch;c10_cuda")
else()
  set(METALOAD_TORCH_LIBS "torch_cpu;c10;torch")
endif()
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/metaloadConfig.cmake.in" "${PROJECT_BINARY_DIR}/metaloadConfig.cmake"
  INSTALL_DESTINATION "${_config_dir}" PATH_VARS METALOAD_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR)
# 0.x: a minor version may change the API.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/metaloadConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/metaloadConfig.cmake" "${PROJECT_BINARY_DIR}/metaloadConfigVersion.cmake"
  DESTINATION "${_config_dir}")
