#include "tests/faults/serving_faults.h"

#include "tests/faults/no_checksum.h"
#include "util/log.h"

namespace metaload {

bool ServingFaults::ArmFromEnvironment() {
  if (!kill_.ArmFromEnvironment()) return false;
  checksums_off_ = ChecksumsOffFromEnvironment();
  if (checksums_off_) {
    LogWarning(
        "TEST MODE IS ON: METALOAD_TEST_NO_CHECKSUM=1: this daemon sends chunks without checksums, which "
        "ranks refuse unless they run with it too. For measurements only: unset it on real daemons.");
  }
  corrupt_ = ChunkFault::FromEnvironment();
  return true;
}

void ServingFaults::ChunkRead(absl::Span<uint8_t> payload) {
  // Counted even when empty, so that "the N-th chunk" means the N-th chunk sent.
  if (corrupt_.CorruptNext() && !payload.empty()) payload[payload.size() / 2] ^= 0x01;
}

}  // namespace metaload
