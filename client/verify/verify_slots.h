// What each rank contributes to verification, and how every rank reads the others'. Each
// rank owns one slot of a buffer; the all-reduce (sum) of the buffers over all ranks is the
// concatenation of the slots, since every other rank's slot is zero. Pure, torch-free.
//
// Slot layout (kSlotBytes): 8 bytes of bad-tensor count (little endian), 8 of flags, 8 each of
// the digest counts (tensors whose bytes matched their registered digest, sliced tensors and
// tensors on a device not checked), kDigestBytes of plan digest (hex, zero-padded),
// kLabelBytes of plan label, then the findings as text, newline-separated, cut with a note if
// longer than the slot.
// 4 KiB x 1,024 ranks = 4 MiB.
#ifndef METALOAD_CLIENT_VERIFY_VERIFY_SLOTS_H_
#define METALOAD_CLIENT_VERIFY_VERIFY_SLOTS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace metaload {

inline constexpr size_t kSlotBytes = 4096;
inline constexpr size_t kDigestBytes = 64;
inline constexpr size_t kLabelBytes = 96;

struct RankReport {
  int64_t bad_tensor_count = 0;       // tensors on meta, never allocated or unfilled
  bool could_not_load = false;        // the rank never got as far as its tensors
  std::string plan_digest;            // empty when it has no plan
  std::string plan_label;             // "tp 2 x pp 1, 4 ranks"
  std::vector<std::string> findings;  // one line each
  // Registered digests (`register --digest`): whether this rank's plan carries any, and what
  // this rank proved with them (client/read/fill.h DigestCheck).
  bool has_digests = false;
  int64_t digest_matched_count = 0;
  int64_t digest_sliced_count = 0;
  int64_t digest_on_device_count = 0;
};

// Writes `report` into `slot` (REQUIRES: kSlotBytes long, zeroed). Findings that do not fit
// are cut, ending with "... (N more findings cut)".
void EncodeSlot(const RankReport& report, absl::Span<uint8_t> slot);
// Reads a slot back. Tolerates anything (the bytes came over the network): counts are taken
// as written, text up to the first NUL.
RankReport DecodeSlot(absl::Span<const uint8_t> slot);

}  // namespace metaload

#endif  // METALOAD_CLIENT_VERIFY_VERIFY_SLOTS_H_
