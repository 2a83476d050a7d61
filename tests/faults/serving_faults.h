// FOR TESTS ONLY: the ServingHooks (daemon/serving/read_range/serving_hooks.h) that metad_faulty
// arms from its environment, as metad itself did before the faults left it:
//   METALOAD_TEST_KILL_AFTER_BYTES, METALOAD_TEST_KILL_SIGNAL  the daemon kills, stops or
//       terminates itself after serving N bytes (kill_fault.h);
//   METALOAD_TEST_CORRUPT_CHUNKS  flips a byte of the N-th (or every) chunk after its checksum
//       (chunk_fault.h);
//   METALOAD_TEST_NO_CHECKSUM=1  chunks go without a checksum, as from an older daemon
//       (no_checksum.h);
//   METALOAD_TEST_SERVE_ZEROS=1  every chunk's payload is zeros, checksummed as sent: a hostile
//       server whose bytes every chunk check passes (only the registered digests catch it).
// Each logs the same loud warning at start as before. In-process tests may arm one directly.
//
//   ServingFaults faults;
//   if (!faults.ArmFromEnvironment()) return 2;
//   ServiceSeams seams;  seams.serving_hooks = &faults;
//
// Thread-safety: arm once, before serving; the hooks may then be called from any thread.
#ifndef METALOAD_TESTS_FAULTS_SERVING_FAULTS_H_
#define METALOAD_TESTS_FAULTS_SERVING_FAULTS_H_

#include <cstdint>

#include "absl/types/span.h"
#include "daemon/serving/read_range/serving_hooks.h"
#include "tests/faults/chunk_fault.h"
#include "tests/faults/kill_fault.h"

namespace metaload {

class ServingFaults final : public ServingHooks {
 public:
  ServingFaults() = default;  // nothing armed
  // `corrupt`: the chunks to corrupt, for a test that arms it in-process.
  explicit ServingFaults(const ChunkFault& corrupt) : corrupt_(corrupt) {}

  // Reads the variables above, logging a warning for each one set; false (and a logged error)
  // when the kill fault's are malformed (metad_faulty then exits 2).
  bool ArmFromEnvironment();

  bool ChecksumChunk() override { return !checksums_off_; }
  void ForgeChunk(absl::Span<uint8_t> payload) override;
  void ChunkRead(absl::Span<uint8_t> payload) override;
  void BytesServed(uint64_t served_bytes) override { kill_.BytesServed(served_bytes); }

 private:
  KillFault kill_;
  ChunkFault corrupt_;
  bool checksums_off_ = false;
  bool serve_zeros_ = false;
};

}  // namespace metaload

#endif  // METALOAD_TESTS_FAULTS_SERVING_FAULTS_H_
