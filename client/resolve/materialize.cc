#include "client/resolve/materialize.h"

#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "client/resolve/missing_init.h"
#include "planner/doctor/missing_groups.h"
#include "planner/doctor/shape_summary.h"
#include "planner/skeleton/skeleton.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// How a missing tensor's fix is said to the Python package's users.
constexpr char kMissingFix[] = "init_missing=\"zeros\" or \"normal:STD\"";

// The findings for people: tensors the checkpoint lacks grouped as `metactl check` groups them
// (a run of missing layers is one line, a tying mismatch is named), then every other finding.
std::vector<std::string> Summarize(const ModelView& view, const std::vector<MaterializeRequest>& requests,
                                   const std::vector<Finding>& refused) {
  const std::string missing_reason = MissingTensorReason(kMissingFix);
  // The module as a skeleton: its tensors, in module order, and the ties the checkpoint has.
  Skeleton module;
  module.model = view.model;
  for (const MaterializeRequest& r : requests) {
    module.tensors.push_back(SkeletonTensor{r.name, r.full_shape, DType::kF32, r.is_buffer, true, ""});
  }
  for (const auto& [alias, stored] : view.tied_to) module.tied_groups.push_back({stored, alias});
  std::vector<std::string> missing, lines;
  for (const Finding& f : refused) {
    if (f.why == missing_reason) missing.push_back(f.tensor);
  }
  for (const MissingGroup& group : GroupMissing(missing, module)) {
    if (group.kind == MissingKind::kTensor) {
      lines.push_back(absl::StrCat(group.tensors.front(), ": it is not in the checkpoint"));
    } else {
      lines.push_back(group.message);
      if (!group.fix.empty()) lines.push_back(absl::StrCat("  fix: ", group.fix));
    }
  }
  if (!missing.empty()) {
    lines.push_back(
        "fix: initialize what the checkpoint lacks explicitly with init_missing=\"zeros\" or "
        "\"normal:STD\", or load a checkpoint that has it");
  }
  // Tensors of another shape than the checkpoint's: many of them (a module of another variant)
  // are one summary line, the first few findings and a count, as `metactl check` says them.
  std::vector<TensorMismatch> shapes;
  std::set<std::string> reshaped;
  // Scales held in a granularity their codes declare are judged with their codes (the resolver's
  // KeptGranularityProblem), not as a module of another size.
  std::set<std::string> declared;
  for (const MaterializeRequest& r : requests) {
    auto value = view.quantized.values.find(r.name);
    if (!r.scale_block.empty() && value != view.quantized.values.end())
      declared.insert(value->second.scales.name);
  }
  for (const MaterializeRequest& r : requests) {
    if (declared.count(r.name) > 0) continue;
    auto stored = view.stored.find(r.name);
    if (auto alias = view.tied_to.find(r.name); stored == view.stored.end() && alias != view.tied_to.end()) {
      stored = view.stored.find(alias->second);
    }
    if (stored == view.stored.end() || stored->second.shape == r.full_shape) continue;
    shapes.push_back(TensorMismatch{r.name, r.full_shape, stored->second.shape});
    reshaped.insert(r.name);
  }
  const std::optional<std::string> shape_summary = ShapeMismatchSummary(shapes);
  if (shape_summary.has_value()) lines.push_back(*shape_summary);
  size_t shape_lines = 0;
  for (const Finding& f : refused) {
    if (f.why == missing_reason) continue;
    if (shape_summary.has_value() && reshaped.count(f.tensor) > 0 && ++shape_lines > kFindingsAfterSummary)
      continue;
    lines.push_back(absl::StrCat(f.tensor, ": ", f.why));
  }
  if (shape_lines > kFindingsAfterSummary) {
    lines.push_back(absl::StrCat("and ", shape_lines - kFindingsAfterSummary, " more of another shape"));
  }
  return lines;
}

}  // namespace

absl::StatusOr<MaterializeOutcome> Materialize(const ModelView& view,
                                               std::vector<MaterializeRequest>& requests,
                                               const MaterializeSettings& settings) {
  InitPolicy policy;
  if (settings.init_missing.has_value()) {
    policy = *settings.init_missing;
  } else {
    ML_ASSIGN_OR_RETURN(policy, ParseInitPolicy(view.init_missing));
  }
  MaterializeOutcome outcome;
  const std::vector<Resolution> plan = Resolve(view, requests, policy, kMissingFix, settings.dequantize);
  for (size_t i = 0; i < requests.size(); ++i) {
    if (plan[i].kind == Resolution::Kind::kRefused)
      outcome.refused.push_back({requests[i].name, plan[i].detail});
  }
  if (!outcome.refused.empty()) {
    outcome.summary = Summarize(view, requests, outcome.refused);
    return outcome;
  }
  if (settings.check_only) {
    outcome.results.resize(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      if (plan[i].kind == Resolution::Kind::kModule)
        outcome.results[i].provenance.kind = Provenance::Kind::kModule;
      if (plan[i].kind == Resolution::Kind::kDequantize) {  // what the caller accounts the scales to
        outcome.results[i].provenance.kind = Provenance::Kind::kDequantized;
        outcome.results[i].provenance.rule = plan[i].detail;
      }
    }
    return outcome;
  }
  ReadSettings read = settings.read;
  const std::unique_ptr<ProgressMeter> meter =
      ProgressMeter::Start(read.progress, read.progress_interval, PlannedTotals(requests, plan));
  read.meter = meter.get();
  ML_ASSIGN_OR_RETURN(FillOutcome filled, settings.fill ? settings.fill(view, requests, plan, policy, read)
                                                        : FillResolved(view, requests, plan, policy, read));
  outcome.results = std::move(filled.results);
  outcome.direct_bytes = filled.direct_bytes;
  outcome.streamed_bytes = filled.streamed_bytes;
  return outcome;
}

}  // namespace metaload
