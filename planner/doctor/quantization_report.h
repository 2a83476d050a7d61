// The meta doctor's words about a quantized checkpoint (MatchReport::quantization,
// planner/doctor/quantized_match.h): the method and what metaload can do with it, the tensors a
// dequantizing load fills, the stored tensors it refuses, and the verdict they decide. Each entry
// is an object with a "message" (and a "fix" where something should be done), as every finding of
// check_report.h, which renders them. Internal to planner/doctor/.
#ifndef METALOAD_PLANNER_DOCTOR_QUANTIZATION_REPORT_H_
#define METALOAD_PLANNER_DOCTOR_QUANTIZATION_REPORT_H_

#include <optional>
#include <string>
#include <vector>

#include "planner/doctor/match.h"
#include "util/json/json_util.h"

namespace metaload {

// The "quantization" finding: empty when the checkpoint is not quantized.
std::vector<json_util::OrderedJson> QuantizationEntries(const MatchReport& report);
// One entry per tensor a dequantizing load fills (--dequantize), skeleton order.
std::vector<json_util::OrderedJson> DequantizedEntries(const MatchReport& report);
// One entry per stored tensor a dequantizing load refuses (--dequantize), naming it.
std::vector<json_util::OrderedJson> QuantizationProblemEntries(const MatchReport& report);

// For a skeleton tensor whose stored tensor `stored_name` holds a declared quantization's codes
// (or, MXFP4, whose value it is): why reading it as values is wrong and the fix; false otherwise.
bool DescribeStoredQuantized(const MatchReport& report, const std::string& tensor,
                             const std::string& stored_name, std::string* message, std::string* fix);

// False when the quantization alone refuses the load: a method metaload does not read, or a
// stored tensor a dequantizing load refuses.
bool QuantizationPasses(const MatchReport& report);
// The verdict line when the quantization decides it ("verdict: refused — ..."), else nullopt.
std::optional<std::string> QuantizationVerdict(const MatchReport& report);

}  // namespace metaload

#endif  // METALOAD_PLANNER_DOCTOR_QUANTIZATION_REPORT_H_
