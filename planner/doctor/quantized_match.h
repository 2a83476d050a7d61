// The meta doctor's judgement of a quantized checkpoint (docs/quantization.md, "The doctor and
// the planner"): which method and scheme its config.json declares, which skeleton tensors hold its
// codes as stored, and — judged as a dequantizing load would (`metactl check --dequantize`) —
// which are filled from codes and scales, which scale tensors that consumes, and which stored
// tensors no dequantization can read. The pairing of codes with scales is
// planner/format/quantization.h's; this file only applies it to a MatchReport.
//
//   MatchReport report = MatchSkeleton(skeleton, checkpoint);
//   MatchQuantization(skeleton, &checkpoint.tensors, declared, "/m/config.json", dequantize, &report);
//
// Pure.
#ifndef METALOAD_PLANNER_DOCTOR_QUANTIZED_MATCH_H_
#define METALOAD_PLANNER_DOCTOR_QUANTIZED_MATCH_H_

#include <optional>
#include <string>
#include <vector>

#include "planner/doctor/match.h"
#include "planner/format/quantization.h"
#include "planner/skeleton/skeleton.h"

namespace metaload {

// Sets report->quantization when `declared` is set (the checkpoint's config.json
// quantization_config, from `config_path`) or when `stored` holds FP8/U8 codes with scale tensors
// beside them; else leaves the report as it is. `stored`: the checkpoint's tensors; nullptr when
// only its index was read (then only the declared method is judged).
// Under `dequantize`, for a declared method metaload reads: a refused conversion of a value's
// codes into a floating-point skeleton tensor becomes a dequantized tensor, an MXFP4 value the
// skeleton names (`x` for stored `x_blocks` + `x_scales`) is no longer missing when its shape is
// the skeleton's (else it is a shape mismatch), the scales (and MXFP4 codes) those consume are no
// longer unexpected, and every FindQuantized problem is a problem naming its tensor.
// REQUIRES: `report` is MatchSkeleton(skeleton, ...)'s (or MatchSkeletonNames' with stored null).
void MatchQuantization(const Skeleton& skeleton, const std::vector<TensorLayout>* stored,
                       const std::optional<Quantization>& declared, const std::string& config_path,
                       bool dequantize, MatchReport* report);

}  // namespace metaload

#endif  // METALOAD_PLANNER_DOCTOR_QUANTIZED_MATCH_H_
