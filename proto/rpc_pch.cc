// The translation unit that carries the precompiled contract headers (CMakeLists.txt).
