// FOR TESTS ONLY: a fault a test arms to make this daemon die mid-stream, as a crashed host
// would. With METALOAD_TEST_KILL_AFTER_BYTES=N in its environment, metad raises SIGKILL on itself
// once it has sent at least N payload bytes of ReadRange (tests/integration/robustness/test_failover.py).
// With METALOAD_TEST_KILL_SIGNAL=SIGSTOP as well, it freezes instead (once): a daemon that hangs
// with its connections open, as a host that vanished without a reset; with SIGTERM, it stops
// as an operator would stop it (leaves, lets streams finish within shutdown_grace).
// Never set them in production: the daemon logs a warning at start when it is armed.
//
//   ArmKillFaultFromEnvironment();            // main, once, before serving
//   KillIfServedPast(bytes_served_so_far);    // where payload bytes are counted
//
// Thread-safety: KillIfServedPast may be called from any thread once armed.
#ifndef METALOAD_DAEMON_SERVING_READ_RANGE_KILL_FAULT_H_
#define METALOAD_DAEMON_SERVING_READ_RANGE_KILL_FAULT_H_

#include <cstdint>

namespace metaload {

// Reads METALOAD_TEST_KILL_AFTER_BYTES (and METALOAD_TEST_KILL_SIGNAL) once; false (and a logged
// error) when one is set but not a positive integer (SIGKILL, SIGSTOP or SIGTERM).
bool ArmKillFaultFromEnvironment();

// SIGKILLs (or SIGSTOPs or SIGTERMs, once) this process when armed and `served_bytes` >= the threshold.
void KillIfServedPast(uint64_t served_bytes);

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVING_READ_RANGE_KILL_FAULT_H_
