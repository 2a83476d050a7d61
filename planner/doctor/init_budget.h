// How much of a model an init policy may stand in for: the one rule `metactl register` (through
// AdmitLoad, admission.h) and the Python package's materialize (through metaload._native) apply.
// A policy may never initialize most of the model (more than half of its tensors: the names or
// the checkpoint are wrong, and zeros would hide it); one catch-all policy ("zeros" for whatever
// is missing) may initialize at most a tenth, since it is for a few new tensors (a value head):
// more must be named, by name or pattern, so that a wrong checkpoint is not zero-filled in silence.
//
//   InitBudgetVerdict v = JudgeInitBudget(missing, total, InitScope::kCatchAll);
//   if (v != InitBudgetVerdict::kAllowed)
//     return RefusedModelError(InitBudgetRefusal(v, missing, total, {InitSurface::kMetactl, "zeros",
//     first}));
//
// Pure functions; thread-compatible.
#ifndef METALOAD_PLANNER_DOCTOR_INIT_BUDGET_H_
#define METALOAD_PLANNER_DOCTOR_INIT_BUDGET_H_

#include <cstdint>
#include <string>

namespace metaload {

// What the policy names: one policy for every missing tensor (`--init-missing zeros`,
// init_missing="zeros"), or policies by name or pattern (init_missing={"score.*": "zeros"}).
enum class InitScope { kCatchAll, kNamed };

enum class InitBudgetVerdict {
  kAllowed,
  kMostOfTheModel,      // more than half of the tensors, whatever the scope
  kCatchAllOverATenth,  // a catch-all policy, more than a tenth
};

// Whether a policy of `scope` may initialize `initialized` of the model's `total` tensors.
// Exact at any count (no multiplication that could overflow); nothing to initialize is always
// allowed, and more than `total` (or any of 0) is most of the model.
InitBudgetVerdict JudgeInitBudget(uint64_t initialized, uint64_t total, InitScope scope);

// Where the policy was given: the refusal names it, and its fix, in that surface's own form.
enum class InitSurface {
  kMetactl,  // `--init-missing POLICY`, counting the skeleton's tensors
  kPython,   // materialize's init_missing=, counting the module's tensors
};

struct InitBudgetWords {
  InitSurface surface = InitSurface::kMetactl;
  std::string policy;   // the catch-all policy as given ("zeros", "normal:0.02"); unused for kNamed
  std::string example;  // one tensor the policy would initialize, for the fix's example
};

// Why `verdict` refuses the policy, for people; "" for kAllowed. The metactl refusals end with
// "...:" for the caller to append what the checkpoint lacks; so does kPython's kMostOfTheModel
// (the refused tensors follow it), while its kCatchAllOverATenth ends with the fix:
// init_missing={"<example>": "<policy>"}.
std::string InitBudgetRefusal(InitBudgetVerdict verdict, uint64_t initialized, uint64_t total,
                              const InitBudgetWords& words);

}  // namespace metaload

#endif  // METALOAD_PLANNER_DOCTOR_INIT_BUDGET_H_
