// FOR TESTS ONLY (linked into metad_faulty, never metad): a fault a test arms to make a daemon
// die mid-stream, as a crashed host would. With METALOAD_TEST_KILL_AFTER_BYTES=N in its
// environment, metad_faulty raises SIGKILL on itself once it has sent at least N payload bytes
// of ReadRange (tests/integration/robustness/test_failover.py). With METALOAD_TEST_KILL_SIGNAL=
// SIGSTOP as well, it freezes instead (once): a daemon that hangs with its connections open, as
// a host that vanished without a reset; with SIGTERM, it stops as an operator would stop it
// (leaves, lets streams finish within shutdown_grace). The daemon logs a warning at start when
// it is armed.
//
//   KillFault kill;
//   if (!kill.ArmFromEnvironment()) return 2;   // once, before serving
//   kill.BytesServed(bytes_served_so_far);       // ServingHooks::BytesServed (serving_faults.h)
//
// Thread-safety: BytesServed may be called from any thread once armed.
#ifndef METALOAD_TESTS_FAULTS_KILL_FAULT_H_
#define METALOAD_TESTS_FAULTS_KILL_FAULT_H_

#include <signal.h>

#include <atomic>
#include <cstdint>

namespace metaload {

class KillFault {
 public:
  // Reads METALOAD_TEST_KILL_AFTER_BYTES (and METALOAD_TEST_KILL_SIGNAL) once; false (and a
  // logged error) when one is set but not a positive integer (SIGKILL, SIGSTOP or SIGTERM).
  bool ArmFromEnvironment();

  // SIGKILLs (or SIGSTOPs or SIGTERMs, once) this process when armed and `served_bytes` >= the
  // threshold.
  void BytesServed(uint64_t served_bytes);

 private:
  std::atomic<uint64_t> kill_after_bytes_{0};  // 0: not armed
  std::atomic<int> signal_{SIGKILL};
};

}  // namespace metaload

#endif  // METALOAD_TESTS_FAULTS_KILL_FAULT_H_
