#include "tests/faults/chunk_fault.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "util/log.h"

namespace metaload {

absl::StatusOr<ChunkFault> ChunkFault::Parse(absl::string_view text) {
  ChunkFault fault;
  if (text.empty()) return fault;
  if (text == "all") {
    fault.every_ = true;
    return fault;
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(text, &n) || n == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kCorruptChunksEnv, "=\"", text, "\": use N (corrupt the N-th chunk served, from 1) or all"));
  }
  fault.nth_ = n;
  return fault;
}

ChunkFault ChunkFault::FromEnvironment() {
  const char* value = std::getenv(kCorruptChunksEnv);
  if (value == nullptr || *value == '\0') return ChunkFault();
  absl::StatusOr<ChunkFault> parsed = Parse(value);
  if (!parsed.ok()) LogWarning(absl::StrCat(parsed.status().message(), "; corrupting every chunk instead"));
  ChunkFault fault = parsed.ok() ? *parsed : *Parse("all");
  LogWarning(absl::StrCat("TEST FAULT INJECTION IS ON: ", kCorruptChunksEnv, "=", value,
                          ": this daemon corrupts ", fault.Describe(),
                          " it serves. For tests only: unset it on real daemons."));
  return fault;
}

bool ChunkFault::CorruptNext() {
  if (!active()) return false;
  const uint64_t number = served_.fetch_add(1, std::memory_order_relaxed) + 1;
  return every_ || number == nth_;
}

std::string ChunkFault::Describe() const {
  if (every_) return "every chunk";
  if (nth_ > 0) return absl::StrCat("chunk number ", nth_);
  return "no chunk";
}

}  // namespace metaload
