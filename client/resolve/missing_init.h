// Values for a tensor the checkpoint lacks, as the user's --init-missing / init_missing= asks
// (planner/skeleton/init_policy.h). Shared by the plan-driven rank load and materialize.
#ifndef METALOAD_CLIENT_RESOLVE_MISSING_INIT_H_
#define METALOAD_CLIENT_RESOLVE_MISSING_INIT_H_

#include <torch/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "planner/plan/slice.h"
#include "planner/skeleton/init_policy.h"

namespace metaload {

// What the error says when a tensor is missing and the policy is "error": the fix, in the
// caller's terms (`fix` e.g. "--init-missing zeros|normal:STD").
std::string MissingTensorReason(const std::string& fix);

// Fills `dest`, the `box` part (absent: all) of tensor `name` of shape `full_shape`. For
// normal:STD the values are drawn for the whole tensor from a generator seeded by the name,
// so every rank holding a part of it, and every run, gets parts of one and the same tensor.
// `policy` must initialize (not kError).
absl::Status InitializeMissing(const InitPolicy& policy, const std::string& name,
                               const std::vector<int64_t>& full_shape, const std::optional<TensorBox>& box,
                               at::Tensor& dest);

}  // namespace metaload

#endif  // METALOAD_CLIENT_RESOLVE_MISSING_INIT_H_
