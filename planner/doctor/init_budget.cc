#include "planner/doctor/init_budget.h"

#include "absl/strings/str_cat.h"

namespace metaload {

InitBudgetVerdict JudgeInitBudget(uint64_t initialized, uint64_t total, InitScope scope) {
  if (initialized == 0) return InitBudgetVerdict::kAllowed;
  // n > floor(t / k) is k·n > t for integers, without computing k·n.
  if (initialized > total / 2) return InitBudgetVerdict::kMostOfTheModel;
  if (scope == InitScope::kCatchAll && initialized > total / 10)
    return InitBudgetVerdict::kCatchAllOverATenth;
  return InitBudgetVerdict::kAllowed;
}

std::string InitBudgetRefusal(InitBudgetVerdict verdict, uint64_t initialized, uint64_t total,
                              const InitBudgetWords& words) {
  const bool python = words.surface == InitSurface::kPython;
  const std::string whose = python ? "the module's" : "the skeleton's";
  switch (verdict) {
    case InitBudgetVerdict::kAllowed:
      return "";
    case InitBudgetVerdict::kMostOfTheModel:
      // A Python policy may be a dict of patterns: named by its option alone.
      return absl::StrCat(
          python ? "init_missing" : absl::StrCat("--init-missing ", words.policy), " would initialize ",
          initialized, " of ", whose, " ", total,
          " tensors, most of the model: refused; what the checkpoint lacks is the real problem:");
    case InitBudgetVerdict::kCatchAllOverATenth:
      if (python) {
        return absl::StrCat("init_missing=\"", words.policy,
                            "\" applies to a few missing tensors only, here ", initialized, " of ", whose,
                            " ", total, ": name them, or a pattern, as init_missing={\"", words.example,
                            "\": \"", words.policy, "\"}");
      }
      // metactl has no policy by pattern: the fixes are the checkpoint, the skeleton, or Python's.
      return absl::StrCat("--init-missing ", words.policy,
                          " applies to a few missing tensors only (at most a tenth of ", whose,
                          ": a new head, say), here ", initialized, " of ", whose, " ", total,
                          ": refused; load the checkpoint that has them, or a skeleton without them, or name "
                          "them in Python (materialize(..., init_missing={\"",
                          words.example, "\": \"", words.policy, "\"})); what the checkpoint lacks:");
  }
  return "";
}

}  // namespace metaload
