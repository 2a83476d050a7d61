#include "client/resolve/materialize.h"

#include "absl/strings/str_cat.h"
#include "client/resolve/missing_init.h"
#include "planner/doctor/missing_groups.h"
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
  for (const Finding& f : refused) {
    if (f.why != missing_reason) lines.push_back(absl::StrCat(f.tensor, ": ", f.why));
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
