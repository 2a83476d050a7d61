#include "planner/doctor/admission.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/doctor/init_budget.h"
#include "util/error_kind.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

constexpr size_t kNamedInError = 4;

std::string Some(const std::vector<std::string>& names) {
  const size_t shown = std::min(names.size(), kNamedInError);
  return absl::StrCat(absl::StrJoin(names.begin(), names.begin() + shown, ", "),
                      names.size() > shown ? absl::StrCat(" and ", names.size() - shown, " more") : "");
}

}  // namespace

std::vector<std::string> RefusedExtras(const MatchReport& report) {
  std::vector<std::string> refused;
  for (const std::string& name : report.unexpected) {
    const ExtraKind kind = ClassifyExtra(name);
    if (kind != ExtraKind::kRotaryInvFreq && kind != ExtraKind::kStaleBuffer) refused.push_back(name);
  }
  return refused;
}

std::string ExtrasCause(const MatchReport& report) {
  if (report.layer_hint.has_value()) {
    const LayerCountHint& hint = *report.layer_hint;
    return absl::StrCat("the checkpoint has ", hint.checkpoint_count, " of ", hint.prefix, ", the skeleton ",
                        hint.skeleton_count, ": another size of this model?");
  }
  for (const ExtraGroup& group : report.extras) {
    if (IsQuantizationState(group.kind)) {
      return absl::StrCat("the checkpoint is quantized (", ExtraKindId(group.kind),
                          " state): load it with its quantization, or use the unquantized checkpoint");
    }
  }
  if (report.different_architecture) return "the checkpoint looks like another architecture";
  return "the skeleton has no place for them: another architecture, or another variant of this model?";
}

absl::Status AdmitLoad(const MatchReport& report, const AdmissionRules& rules,
                       const std::string& model_name) {
  if (!rules.init_missing.initializes() || report.missing.empty()) {
    ML_RETURN_IF_ERROR(MatchToStatus(report, model_name));
  } else if (const InitBudgetVerdict budget =
                 JudgeInitBudget(report.missing.size(), report.skeleton_tensor_count, InitScope::kCatchAll);
             budget != InitBudgetVerdict::kAllowed) {
    // --init-missing is one policy for whatever is missing: a catch-all.
    return RefusedModelError(absl::StrCat(
        "model ", model_name, ": ",
        InitBudgetRefusal(budget, report.missing.size(), report.skeleton_tensor_count,
                          {InitSurface::kMetactl, rules.init_missing.ToString(), report.missing.front()}),
        " ", Some(report.missing),
        report.prefix_hint.has_value() ? " (a prefix differs: `metactl check` shows it)" : "",
        "; `metactl check` explains each"));
  } else {
    // An init policy covers tensors the checkpoint lacks (each rank initializes them and says
    // so); nothing covers a shape mismatch.
    MatchReport covered = report;
    covered.missing.clear();
    ML_RETURN_IF_ERROR(MatchToStatus(covered, model_name));
  }
  if (!rules.strict) return absl::OkStatus();
  const std::vector<std::string> refused = RefusedExtras(report);
  if (refused.empty()) return absl::OkStatus();
  return RefusedModelError(absl::StrCat(
      "model ", model_name, ": ", refused.size(),
      refused.size() == 1 ? " checkpoint tensor the skeleton has" : " checkpoint tensors the skeleton has",
      " no place for (", Some(refused), "): ", ExtrasCause(report),
      "; fix: use the skeleton of the checkpoint's own config (register the folder without --skeleton), or "
      "--no-strict to load without them (they are reported, not loaded); `metactl check` explains each"));
}

}  // namespace metaload
