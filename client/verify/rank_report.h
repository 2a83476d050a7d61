// What each rank tells the others after a load, and how it travels. Every collective here is a
// byte-wise sum in which each rank writes only its own region (every other rank's is zero), so
// that the sum is the concatenation of the regions: one primitive that Gloo and NCCL both have.
//
// Two rounds (client/verify/exchange.h): every rank's fixed-size header (its counts, flags,
// plan and how many bytes of details it has), then — only when some rank has any — every
// rank's details (its findings and summary lines), each at the offset the headers give. A rank
// with nothing wrong sends nothing but its header: 256 B x 1,024 ranks = 256 KiB.
//
// Pure, torch-free. Decoding tolerates anything (the bytes came from other processes): counts
// are taken as written, text is cut at its field, records past the end are dropped.
#ifndef METALOAD_CLIENT_VERIFY_RANK_REPORT_H_
#define METALOAD_CLIENT_VERIFY_RANK_REPORT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "client/verify/finding.h"
#include "client/verify/tensor_proof.h"

namespace metaload {

inline constexpr size_t kHeaderBytes = 256;
inline constexpr size_t kDigestBytes = 64;
inline constexpr size_t kLabelBytes = 96;
// The details of all ranks together stay under 64 MiB, and one rank's under 1 MiB: findings
// past that are cut (counted, not named).
inline constexpr uint64_t kAllDetailsBytes = uint64_t{64} << 20;
inline constexpr uint64_t kRankDetailsBytes = uint64_t{1} << 20;

struct RankReport {
  int64_t bad_tensor_count = 0;  // tensors on meta, never allocated or unfilled
  bool could_not_load = false;   // the rank never got as far as its tensors
  int64_t checked_count = 0;     // distinct tensors it looked at
  int64_t unproven_count = 0;    // of those, kept as they were: nothing proves their values
  std::string plan_digest;       // empty when it has no plan
  std::string plan_label;        // "tp 2 x pp 1, 4 ranks"
  std::vector<Finding> findings;
  // Lines for people that say the findings better than one line each (runs of missing layers
  // as one line): shown in their place when present.
  std::vector<std::string> summary;
  int64_t findings_cut = 0;       // findings that did not fit in the details (names dropped)
  int64_t initialized_count = 0;  // tensors an init policy filled here (nothing proves their values)
  int64_t computed_count = 0;     // buffers computed here by a rule, or by the module's own init
  int64_t mismatch_count = 0;     // of bad_tensor_count: tensors whose bytes differ from their digests
  // What this rank's bytes of each stored tensor it read prove (client/verify/tensor_proof.h):
  // summed over every rank in the exchange, not sent as they are. The header carries the table
  // they are summed in: its slots (the highest index + 1) and digest kind.
  std::vector<TensorProof> proofs;
  bool has_digests = false;  // some proof carries a registered digest
  int64_t table_slots = 0;
  int64_t table_kind = 0;  // DigestKind of the proofs' digests; kMixedKinds when they differ
  // Stored tensors this rank holds whose content the digests could not check, and why: named,
  // not failed (a policy that requires proof fails them).
  std::vector<Finding> unproven;
};

inline constexpr int64_t kMixedKinds = 255;

// The header and table fields of `report` from its proofs (table_slots, table_kind, has_digests).
void SetTableOf(RankReport& report);

// The bytes of `report`'s findings and summary, at most `limit` long: the findings that do not
// fit are dropped and counted in *cut.
std::string EncodeDetails(const RankReport& report, uint64_t limit, int64_t* cut);
// Reads details back into report->findings and report->summary.
void DecodeDetails(absl::Span<const uint8_t> details, RankReport* report);

// Writes `report`'s header (REQUIRES: kHeaderBytes long, zeroed), saying that `details_bytes`
// of details follow and that report.findings_cut were cut.
void EncodeHeader(const RankReport& report, uint64_t details_bytes, absl::Span<uint8_t> header);
// Reads a header back (findings and summary empty); *details_bytes: what it says follows.
RankReport DecodeHeader(absl::Span<const uint8_t> header, uint64_t* details_bytes);

}  // namespace metaload

#endif  // METALOAD_CLIENT_VERIFY_RANK_REPORT_H_
