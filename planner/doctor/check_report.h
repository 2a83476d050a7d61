// The meta doctor's report (`metactl check`): every finding of a MatchReport with what it
// means and the fix that works, as text for people and as JSON for scripts. The JSON keys
// are a contract (docs/cli.md, "check"); the text's wording may change.
//
//   MatchReport report = MatchSkeleton(skeleton, checkpoint);
//   std::cout << CheckReportToText(report, {"model.json", "/models/llama", skeleton.model});
//   return CheckPasses(report, /*strict=*/true) ? 0 : 3;
//
// Fixes follow what works: use the model class that matches the checkpoint, load the
// missing weights, or initialize new layers explicitly; never move a placed model afterwards.
#ifndef METALOAD_PLANNER_DOCTOR_CHECK_REPORT_H_
#define METALOAD_PLANNER_DOCTOR_CHECK_REPORT_H_

#include <string>

#include "planner/doctor/match.h"

namespace metaload {

// What was checked, as the user named it (for the report's first line and JSON).
struct CheckSubject {
  std::string skeleton;    // the skeleton file, config.json or checkpoint it came from
  std::string checkpoint;  // the checkpoint checked against
  std::string model;       // the skeleton's model name; may be empty
  bool strict = true;      // as register and load would run: unexpected tensors refused (admission.h)
};

// The last line of every report, without a newline: "verdict: OK — nothing would stay on
// meta (2 unexpected tensors ignored)", "verdict: 3 tensors would stay on meta" or, `strict`,
// "verdict: refused — 4 unexpected checkpoint tensors: ...".
std::string CheckVerdict(const MatchReport& report, bool strict);

// Whether register and load would accept the pair: nothing would stay on meta and, `strict`, no
// refused extras (AdmitLoad without an init policy).
bool CheckPasses(const MatchReport& report, bool strict);

// Sections (would stay on meta, diagnosis, dtype, unexpected, tied, non-persistent), each
// only when it has entries, long lists cut after 20 names; ends with CheckVerdict and "\n".
// What would stay on meta shows each of report.missing_groups as one finding, in place of its
// tensors.
std::string CheckReportToText(const MatchReport& report, const CheckSubject& subject);

// The `metaload.check/1` JSON document (docs/cli.md): every name, no cut, and the groups
// beside them ("missing_groups"); ends with "\n".
std::string CheckReportToJson(const MatchReport& report, const CheckSubject& subject);

}  // namespace metaload

#endif  // METALOAD_PLANNER_DOCTOR_CHECK_REPORT_H_
