// Whether a load may proceed: the one rule `metactl register` (the gate every `metactl load`
// passes), `metactl check`'s verdict and the planner share. Beyond what would stay on meta
// (match.h), a strict load (the default) refuses checkpoint tensors the skeleton has no place
// for, except the buffers older versions persisted that current ones compute (transformers
// drops them too); and an init policy may not stand in for more than its budget (init_budget.h).
//
//   ML_RETURN_IF_ERROR(AdmitLoad(MatchSkeleton(skeleton, checkpoint), {strict, policy}, "llama"));
//
// Pure functions; thread-compatible.
#ifndef METALOAD_PLANNER_DOCTOR_ADMISSION_H_
#define METALOAD_PLANNER_DOCTOR_ADMISSION_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "planner/doctor/match.h"
#include "planner/skeleton/init_policy.h"

namespace metaload {

struct AdmissionRules {
  // false (--no-strict, strict=False): unexpected checkpoint tensors are reported, not refused.
  bool strict = true;
  InitPolicy init_missing;  // what covers tensors the checkpoint lacks
};

// The unexpected checkpoint tensors a strict load refuses, checkpoint order: every extra but
// rotary inv_freq and stale buffers.
std::vector<std::string> RefusedExtras(const MatchReport& report);

// Why the checkpoint holds tensors the skeleton has no place for, as a person would guess it:
// "the checkpoint has 4 of model.layers, the skeleton 2: another size of this model?",
// quantization state, another architecture.
std::string ExtrasCause(const MatchReport& report);

// OK when the load may proceed under `rules`. Else RefusedModelError (exit 2) naming the
// tensors, the likely cause and the fix: an init policy beyond its budget (init_budget.h: most
// of the model, or — --init-missing being one policy for whatever is missing — more than a
// tenth), a tensor that would stay on meta (MatchToStatus), or — strict — refused extras.
absl::Status AdmitLoad(const MatchReport& report, const AdmissionRules& rules, const std::string& model_name);

}  // namespace metaload

#endif  // METALOAD_PLANNER_DOCTOR_ADMISSION_H_
