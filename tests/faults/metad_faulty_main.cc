// metad_faulty: metad (daemon/metad_main.h) with the test faults armed from its environment
// (serving_faults.h). For the tests and the demo that break a daemon on purpose; the production
// metad holds none of this (tests/integration/robustness/test_no_test_switches.py).
#include "daemon/metad_main.h"
#include "tests/faults/serving_faults.h"

int main(int argc, char** argv) {
  metaload::ServingFaults faults;
  metaload::MetadSeams seams;
  seams.service.serving_hooks = &faults;
  seams.arm = [&faults] { return faults.ArmFromEnvironment(); };
  return metaload::MetadMain(argc, argv, seams);
}
