// The in-memory storage back end (util/fs/memory_file_system.h) registered for "mem://" in a
// test process, once, as a build that ships a back end registers it at start.
#ifndef METALOAD_TESTS_FAULTS_MEMORY_STORAGE_H_
#define METALOAD_TESTS_FAULTS_MEMORY_STORAGE_H_

#include <cstdlib>
#include <iostream>

#include "util/fs/memory_file_system.h"

namespace metaload::testing {

inline MemoryFileSystem& MemoryStorage() {
  static MemoryFileSystem* const memory = [] {
    auto* fs = new MemoryFileSystem();  // lives until exit, as a back end must
    if (absl::Status registered = RegisterFileSystem("mem", fs); !registered.ok()) {
      std::cerr << registered << "\n";
      std::abort();
    }
    return fs;
  }();
  return *memory;
}

}  // namespace metaload::testing

#endif  // METALOAD_TESTS_FAULTS_MEMORY_STORAGE_H_
