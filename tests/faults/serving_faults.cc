#include "tests/faults/serving_faults.h"

#include <algorithm>
#include <cstdlib>
#include <string>

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
  const char* zeros = std::getenv("METALOAD_TEST_SERVE_ZEROS");
  serve_zeros_ = zeros != nullptr && std::string(zeros) == "1";
  if (serve_zeros_) {
    LogWarning(
        "TEST FAULT INJECTION IS ON: METALOAD_TEST_SERVE_ZEROS=1: this daemon serves zeros with matching "
        "checksums, as a hostile member would. Never on a real daemon.");
  }
  return true;
}

void ServingFaults::ForgeChunk(absl::Span<uint8_t> payload) {
  if (serve_zeros_) std::fill(payload.begin(), payload.end(), uint8_t{0});
}

void ServingFaults::ChunkRead(absl::Span<uint8_t> payload) {
  // Counted even when empty, so that "the N-th chunk" means the N-th chunk sent.
  if (corrupt_.CorruptNext() && !payload.empty()) payload[payload.size() / 2] ^= 0x01;
}

}  // namespace metaload
