# `cmake --install build --prefix P`: the client library for C++ launchers. P/lib/libmetaload.so,
# the public facade's headers P/include/metaload/*.h (include/metaload/: load, materialize,
# progress, verify, errors; nothing else: the internal headers stay in the tree) and the CMake package
# P/lib/cmake/metaload (metaloadConfig.cmake: `find_package(metaload)` gives metaload::client).
# Not under `pip install ./`: there client/python/ installs libmetaload.so into the package.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Every header of include/metaload/, and only those: tests/integration/python/test_install.py
# fails if the installed include folder holds anything else, lacks one of include/metaload/,
# or holds a header that includes a project header that is not installed.
set(METALOAD_PUBLIC_HEADERS errors.h load.h materialize.h progress.h verify.h)
list(TRANSFORM METALOAD_PUBLIC_HEADERS PREPEND "${PROJECT_SOURCE_DIR}/include/metaload/")
set(METALOAD_INSTALL_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
install(FILES ${METALOAD_PUBLIC_HEADERS} DESTINATION "${METALOAD_INSTALL_INCLUDEDIR}/metaload")

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
