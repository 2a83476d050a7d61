// What planning a registered model needs of its quantization (docs/quantization.md): with
// `--dequantize` (GetPlanRequest.dequantize) the values its config.json's quantization_config
// pairs as codes and scales (planner/format/quantization.h FindQuantized) become dequantized
// items, and the ranks are sent that quantization_config to pair them again with the same code;
// without it, a floating-point skeleton tensor stored as codes is refused, naming the
// quantization, before any plan is built: its codes would otherwise be held as values.
//
//   ML_ASSIGN_OR_RETURN(QuantizedPlanInputs q, QuantizedPlanOf(*model, options));
//   request.dequantize = q.dequantize ? &q.set : nullptr;
//   if (q.skeleton.has_value()) request.skeleton = &*q.skeleton;
//
// Pure (no I/O); call it where the plan is built.
#ifndef METALOAD_DAEMON_PLANS_QUANTIZED_PLAN_H_
#define METALOAD_DAEMON_PLANS_QUANTIZED_PLAN_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/registry/model_registry.h"
#include "planner/format/quantization.h"
#include "planner/skeleton/skeleton.h"
#include "planner/strategy/strategy.h"

namespace metaload {

struct QuantizedPlanInputs {
  bool dequantize = false;  // options.dequantize, and the model is quantized: plan `set`'s values dequantized
  QuantizedSet set;
  // Set when the registered skeleton was derived from the checkpoint's headers (it names codes and
  // scales): the module a dequantizing load fills instead (planner/skeleton/dequantized_skeleton.h).
  std::optional<Skeleton> skeleton;
  // {"quantization_config": {...}} for the ranks (GetPlanResponse.quantization_config_json); "" unless
  // `dequantize`.
  std::string quantization_config_json;
};

// FailedPrecondition of kind bad input (exit 2) when options.dequantize and the model's config.json
// declares no quantization metaload reads; RefusedModelError (exit 2) when a stored tensor cannot be
// dequantized (FindQuantized's problems) or, without options.dequantize, when a floating-point
// skeleton tensor is stored as codes.
absl::StatusOr<QuantizedPlanInputs> QuantizedPlanOf(const RegisteredModel& model,
                                                    const StrategyOptions& options);

}  // namespace metaload

#endif  // METALOAD_DAEMON_PLANS_QUANTIZED_PLAN_H_
