// metaload/verify.h over client/verify/: the library's VerifyAcrossRanks on the RankLoad a
// LoadedRank holds, or on one made of the tensors a caller filled itself.
#include "metaload/verify.h"

#include "absl/strings/str_cat.h"
#include "client/api/load_access.h"
#include "client/verify/verify.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

absl::StatusOr<Verdict> Verify(const RankLoad& load, const VerificationOptions& options) {
  ML_ASSIGN_OR_RETURN(VerifyOutcome outcome, VerifyAcrossRanks(load, options));
  // Asked for, or the cluster's own rule (require_digests in the coordinator's node config).
  const bool require_proof = options.require_proof || load.proof_required;
  const bool ok = outcome.ok() && (!require_proof || outcome.proven());
  return Verdict{.ok = ok,
                 .summary = ok ? ""
                            : outcome.ok()
                                ? absl::StrCat("content not proven (require_proof): ", outcome.ContentLine())
                                : outcome.Summary(load.world_size),
                 .backend = outcome.backend,
                 .bad_tensor_count = outcome.bad_tensor_count,
                 .bad_ranks = outcome.bad_ranks,
                 .failed_ranks = outcome.failed_ranks,
                 .never_joined = outcome.never_joined,
                 .plan_mismatch = outcome.plan_mismatch,
                 .findings = outcome.Lines(),
                 .proven = outcome.proven(),
                 .content = outcome.ContentLine(),
                 .unproven = outcome.UnprovenLines()};
}

}  // namespace

absl::StatusOr<Verdict> VerifyAcrossRanks(const LoadedRank& load, const VerificationOptions& options) {
  return Verify(LoadedRankAccess::Load(load), options);
}

absl::StatusOr<Verdict> VerifyAcrossRanks(int rank, int world_size, const std::vector<HeldTensor>& tensors,
                                          const VerificationOptions& options) {
  RankLoad held;
  held.rank = rank;
  held.world_size = world_size;
  held.device = "cpu";
  for (const HeldTensor& t : tensors) {
    held.tensors.push_back(
        LoadedTensor{.name = t.name, .tensor = t.tensor, .filled = t.filled, .error = t.error});
  }
  for (const HeldTensor& t : tensors) {
    if (t.tensor.defined() && !t.tensor.is_meta()) {
      held.device = t.tensor.device().str();
      break;
    }
  }
  return Verify(held, options);
}

}  // namespace metaload
