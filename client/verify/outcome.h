// What every rank learns from the exchange of rank reports (client/verify/exchange.h), and the
// one way it is said: metactl load, the library's Verdict and the Python package all print
// these lines. Pure, torch-free.
#ifndef METALOAD_CLIENT_VERIFY_OUTCOME_H_
#define METALOAD_CLIENT_VERIFY_OUTCOME_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "client/verify/finding.h"

namespace metaload {

// What the exchange was about: a load's result (verification), or a load refused before
// anything was read (materialize's admission: the findings are tensors with no source).
enum class ExchangeKind { kVerification, kRefusal };

struct RankedFinding {
  int rank = 0;
  Finding finding;
};

struct VerifyOutcome {
  std::string backend;           // "gloo", "nccl"; empty for one process alone
  int64_t bad_tensor_count = 0;  // tensors, over all ranks (mismatches included)
  std::vector<int> bad_ranks;    // ranks holding one on meta or unfilled
  int64_t mismatch_count = 0;    // of bad_tensor_count: bytes that differ from their digests, over all ranks
  std::vector<int> mismatch_ranks;  // ranks holding one
  std::vector<int> failed_ranks;    // ranks that could not load at all
  std::vector<int> never_joined;    // ranks that did not arrive within the timeout
  // One line per distinct plan when ranks loaded different ones; empty when they agree.
  std::vector<std::string> plan_mismatch;
  std::vector<std::string> notes;       // about no one rank: "ranks 1, 2 never joined within 4 s"
  std::vector<RankedFinding> findings;  // by rank
  std::vector<std::pair<int, std::string>> summaries;  // a rank's own lines, shown instead
  std::vector<std::pair<int, int64_t>> findings_cut;   // (rank, findings it could not name)
  int64_t checked_count = 0;                           // distinct tensors the ranks looked at, summed
  int64_t unproven_count = 0;                          // of those, kept unread (nothing proves their values)
  int64_t initialized_count = 0;                       // filled by an init policy, summed over ranks
  int64_t computed_count = 0;                          // buffers computed by a rule, summed over ranks
  // Stored tensors, each counted once whatever ranks held it (the proofs' table, tensor_proof.h):
  // content checked against its registered digest, read without a digest registered, unproven
  // (a digest the ranks' tiles could not be checked against: named in `unproven`), bytes that
  // differ (also a finding: a failure).
  bool has_digests = false;
  std::string digest_kind;  // "fast" / "strong" when the stored tensors' digests are of one kind
  int64_t stored_checked = 0;
  int64_t stored_no_digest = 0;
  int64_t stored_unproven = 0;
  int64_t stored_mismatch = 0;
  std::vector<RankedFinding> unproven;  // each unproven tensor once, with the first rank naming it

  bool ok() const {
    return bad_tensor_count == 0 && failed_ranks.empty() && never_joined.empty() && plan_mismatch.empty();
  }
  // Tensors on meta or unfilled (mismatches aside), each once however many ranks hold it: one
  // tensor every replica lacks is one tensor. The sum over ranks when some rank could not name
  // all of its findings, or bytes differ somewhere.
  int64_t BadTensorsOnce() const;
  // The headline when !ok(): "2 tensors on meta or unfilled on rank 1; rank 3 could not load
  // (4 ranks)"; a refusal counts "tensors without a source or a place".
  std::string Summary(int world_size, ExchangeKind kind = ExchangeKind::kVerification) const;
  // One line per note and finding: "rank 2: model.norm.weight: still on meta" (a rank's
  // summary lines stand for its findings); a line several ranks share once, naming them all:
  // "ranks 0, 1: lm_head.weight: still on meta".
  std::vector<std::string> Lines() const;
  // The whole message: "verification failed (gloo): <Summary>:", then the plans that differ
  // and Lines(), each on a line of its own, indented.
  std::string Message(int world_size, ExchangeKind kind = ExchangeKind::kVerification) const;
  // Every tensor's content proven (when ok()): every stored tensor checked against its digest,
  // every other one computed by a rule or tied to one that is; nothing read without a digest,
  // unproven, kept as it was or initialized by policy.
  bool proven() const {
    return ok() && stored_no_digest == 0 && stored_unproven == 0 && unproven_count == 0 &&
           initialized_count == 0;
  }
  // What was proven and what was not, in one line: "content proven: 291 stored tensors checked
  // against their registered fast digests; counted on each rank holding one: 64 buffers computed", or
  // "content not proven for every tensor: 270 stored tensors checked against their registered fast digests,
  // 21 read without a digest (register the model with digests to check them), 1 kept as it was".
  std::string ContentLine() const;
  // One line per unproven tensor: "rank 1: model.embed_tokens.weight: unproven: WHY".
  std::vector<std::string> UnprovenLines() const;
};

// "1, 3" or "0-3".
std::string RankList(const std::vector<int>& ranks);

}  // namespace metaload

#endif  // METALOAD_CLIENT_VERIFY_OUTCOME_H_
