// Compiled only to build the precompiled header test binaries reuse (tests/CMakeLists.txt).
