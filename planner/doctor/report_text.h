// The words the doctor's reports share (check_report.h, quantization_report.h,
// missing_groups.h): one spelling of a count with its noun and of the dash that sets off a fix.
#ifndef METALOAD_PLANNER_DOCTOR_REPORT_TEXT_H_
#define METALOAD_PLANNER_DOCTOR_REPORT_TEXT_H_

#include <cstddef>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace metaload::report_text {

inline constexpr char kEmDash[] = "\xE2\x80\x94";

// "1 tensor", "3 tensors".
inline std::string Plural(size_t count, absl::string_view one, absl::string_view many) {
  return absl::StrCat(count, " ", count == 1 ? one : many);
}

}  // namespace metaload::report_text

#endif  // METALOAD_PLANNER_DOCTOR_REPORT_TEXT_H_
