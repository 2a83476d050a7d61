// One line that says what a pile of shape mismatches has in common: how many tensors differ,
// which sizes differ (the skeleton's against the checkpoint's, most common first) and the
// likely cause, a config size of another variant of the model. `metactl check`, `register` and
// `plan` put it before their findings, which it lets them cut short.
//
//   std::optional<std::string> line = ShapeMismatchSummary(report.shape_mismatches);
//   // "19 tensors differ in shape: 128 in the skeleton is 256 in the checkpoint (in 19),
//   //  344 is 688 (in 6): another variant of this model, hidden_size 128 vs the checkpoint's
//   //  256, intermediate_size 344 vs the checkpoint's 688?"
#ifndef METALOAD_PLANNER_DOCTOR_SHAPE_SUMMARY_H_
#define METALOAD_PLANNER_DOCTOR_SHAPE_SUMMARY_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "planner/doctor/match.h"

namespace metaload {

// Findings shown after a summary: the first few, then "and N more".
inline constexpr size_t kFindingsAfterSummary = 5;

// The summary of `mismatches`; nullopt for fewer than two (one finding says it all).
std::optional<std::string> ShapeMismatchSummary(const std::vector<TensorMismatch>& mismatches);

}  // namespace metaload

#endif  // METALOAD_PLANNER_DOCTOR_SHAPE_SUMMARY_H_
