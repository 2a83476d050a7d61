// FOR TESTS ONLY (linked into metad_faulty, never metad): corrupting the chunks a daemon
// serves, to prove that ranks catch it.
//
// METALOAD_TEST_CORRUPT_CHUNKS=N flips one byte of the N-th chunk this daemon serves (1-based,
// counted over all its streams), `all` of every chunk; always after the chunk's checksum was
// computed, so that the rank must see a mismatch. Read once when the daemon starts, which then
// logs a loud warning (docs/integrity.md).
//
//   ChunkFault fault = ChunkFault::FromEnvironment();
//   if (fault.CorruptNext()) payload[n / 2] ^= 1;     // ServingHooks::ChunkRead (serving_faults.h)
//
// Thread-safety: CorruptNext may be called from several threads at once.
#ifndef METALOAD_TESTS_FAULTS_CHUNK_FAULT_H_
#define METALOAD_TESTS_FAULTS_CHUNK_FAULT_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace metaload {

inline constexpr char kCorruptChunksEnv[] = "METALOAD_TEST_CORRUPT_CHUNKS";

class ChunkFault {
 public:
  ChunkFault() = default;  // corrupts nothing
  // Copies what to corrupt; the count of chunks served starts again from zero.
  ChunkFault(const ChunkFault& other) : every_(other.every_), nth_(other.nth_) {}
  ChunkFault& operator=(const ChunkFault& other) {
    every_ = other.every_;
    nth_ = other.nth_;
    served_.store(0);
    return *this;
  }

  // "" (unset): nothing; "N" (1 <= N): the N-th chunk; "all": every chunk. InvalidArgument
  // naming the variable otherwise.
  static absl::StatusOr<ChunkFault> Parse(absl::string_view text);
  // Parse(getenv(kCorruptChunksEnv)), logging a warning when set. A value that does not parse
  // corrupts every chunk (and says so): a test that asked for faults must not silently get none.
  static ChunkFault FromEnvironment();

  bool active() const { return every_ || nth_ > 0; }
  // Counts one chunk served; true when that chunk is to be corrupted.
  bool CorruptNext();
  std::string Describe() const;

 private:
  bool every_ = false;
  uint64_t nth_ = 0;  // 0: none
  std::atomic<uint64_t> served_{0};
};

}  // namespace metaload

#endif  // METALOAD_TESTS_FAULTS_CHUNK_FAULT_H_
