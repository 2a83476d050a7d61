// metad_faulty: metad (daemon/metad_main.h) with the test faults armed from its environment
// (serving_faults.h), and METALOAD_TEST_SLOW_READS=SUFFIX=MS: every read of a file whose path
// ends with SUFFIX (registration's digests, ReadRange) first sleeps MS milliseconds
// (fault_file_system.h). For the tests and the demo that break a daemon on purpose; the
// production metad holds none of this (tests/integration/robustness/test_no_test_switches.py).
#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "daemon/metad_main.h"
#include "tests/faults/fault_file_system.h"
#include "tests/faults/serving_faults.h"
#include "util/log.h"

namespace {

// METALOAD_TEST_SLOW_READS into `disk`; false when it is malformed.
bool ArmSlowReads(metaload::FaultFileSystem& disk, metaload::MetadSeams& seams) {
  const char* value = std::getenv("METALOAD_TEST_SLOW_READS");
  if (value == nullptr) return true;
  const std::string text(value);
  const size_t eq = text.rfind('=');
  int64_t ms = 0;
  if (eq == std::string::npos || eq == 0 || !absl::SimpleAtoi(text.substr(eq + 1), &ms) || ms < 0) {
    std::cerr << "metad_faulty: METALOAD_TEST_SLOW_READS must be SUFFIX=MILLISECONDS\n";
    return false;
  }
  disk.Add({.kind = metaload::FileFault::kSlow,
            .path_suffix = text.substr(0, eq),
            .delay = absl::Milliseconds(ms)});
  seams.service.file_system = &disk;
  metaload::LogWarning("TEST FAULT: METALOAD_TEST_SLOW_READS=" + text + ": reads of these files sleep first");
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  metaload::ServingFaults faults;
  metaload::FaultFileSystem disk;
  metaload::MetadSeams seams;
  seams.service.serving_hooks = &faults;
  seams.arm = [&faults, &disk, &seams] { return faults.ArmFromEnvironment() && ArmSlowReads(disk, seams); };
  return metaload::MetadMain(argc, argv, seams);
}
