// metad's process as a function, so that two executables share it: `metad` (daemon/main.cc),
// which arms nothing, and the test binary `metad_faulty` (tests/faults/metad_faulty_main.cc),
// which hands in the faults the tests arm through METALOAD_TEST_* variables. Everything else —
// flags, config, security, the listener and the accept loop, signals — is this one function's.
//
//   int main(int argc, char** argv) { return metaload::MetadMain(argc, argv, {}); }
#ifndef METALOAD_DAEMON_METAD_MAIN_H_
#define METALOAD_DAEMON_METAD_MAIN_H_

#include <functional>

#include "daemon/service/metad_service.h"

namespace metaload {

struct MetadSeams {
  // What the service reads files through and tells of each chunk it serves; must live until
  // MetadMain returns. Default: production's (no faults).
  ServiceSeams service;
  // Called once, when the node config has been read and before anything is served; false
  // stops metad with exit code 2 (it logs why). Empty: nothing to arm.
  std::function<bool()> arm;
};

// Runs metad until SIGTERM or SIGINT; the process's exit code (0 stopped, 1 failure, 2 bad
// config or flags).
int MetadMain(int argc, char** argv, const MetadSeams& seams);

}  // namespace metaload

#endif  // METALOAD_DAEMON_METAD_MAIN_H_
