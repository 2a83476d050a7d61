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
  std::string backend;            // "gloo", "nccl"; empty for one process alone
  int64_t bad_tensor_count = 0;   // tensors, over all ranks
  std::vector<int> bad_ranks;     // ranks holding them
  std::vector<int> failed_ranks;  // ranks that could not load at all
  std::vector<int> never_joined;  // ranks that did not arrive within the timeout
  // One line per distinct plan when ranks loaded different ones; empty when they agree.
  std::vector<std::string> plan_mismatch;
  std::vector<std::string> notes;       // about no one rank: "ranks 1, 2 never joined within 4 s"
  std::vector<RankedFinding> findings;  // by rank
  std::vector<std::pair<int, std::string>> summaries;  // a rank's own lines, shown instead
  std::vector<std::pair<int, int64_t>> findings_cut;   // (rank, findings it could not name)
  int64_t checked_count = 0;                           // distinct tensors the ranks looked at, summed
  int64_t unproven_count = 0;                          // of those, kept unread (nothing proves their values)
  // Registered digests (`register --digest`), summed over ranks: a tensor held whole by two
  // ranks counts twice. `has_digests`: some rank's plan carries digests.
  bool has_digests = false;
  int64_t digest_matched_count = 0;    // whole CPU tensors whose bytes match
  int64_t digest_sliced_count = 0;     // sliced tensors, not checked
  int64_t digest_on_device_count = 0;  // tensors read onto a CUDA device, not checked

  bool ok() const {
    return bad_tensor_count == 0 && failed_ranks.empty() && never_joined.empty() && plan_mismatch.empty();
  }
  // The headline when !ok(): "2 tensors on meta or unfilled on rank 1; rank 3 could not load
  // (4 ranks)"; a refusal counts "tensors without a source or a place".
  std::string Summary(int world_size, ExchangeKind kind = ExchangeKind::kVerification) const;
  // One line per note and finding: "rank 2: model.norm.weight: still on meta" (a rank's
  // summary lines stand for its findings).
  std::vector<std::string> Lines() const;
  // The whole message: "verification failed (gloo): <Summary>:", then the plans that differ
  // and Lines(), each on a line of its own, indented.
  std::string Message(int world_size, ExchangeKind kind = ExchangeKind::kVerification) const;
  // What the digests proved, appended to the verdict when ok(): "; bytes of 24 tensors match
  // the registered digests (8 sliced tensors not checked)". Empty without digests.
  std::string DigestVerdict() const;
};

// "1, 3" or "0-3".
std::string RankList(const std::vector<int>& ranks);

}  // namespace metaload

#endif  // METALOAD_CLIENT_VERIFY_OUTCOME_H_
