#include "client/resolve/materialize.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/resolve/buffer_init.h"
#include "client/resolve/missing_init.h"
#include "libtorch/torch_glue.h"
#include "planner/doctor/missing_groups.h"
#include "planner/format/checkpoint.h"
#include "planner/skeleton/hf/checkpoint_skeleton.h"
#include "planner/skeleton/skeleton.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// Aliases and buffer rules: what a skeleton knows that the stored tensors do not.
void TakeFromSkeleton(const Skeleton& skeleton, ModelView& view) {
  for (const std::vector<std::string>& group : skeleton.tied_groups) {
    for (size_t i = 1; i < group.size(); ++i) view.tied_to[group[i]] = group.front();
  }
  for (const SkeletonTensor& t : skeleton.tensors) {
    if (t.is_buffer && !t.persistent && !t.init.empty()) view.buffer_rules[t.name] = t.init;
  }
}

absl::StatusOr<ModelView> FromCheckpoint(const ModelSpec& spec) {
  ML_ASSIGN_OR_RETURN(Checkpoint checkpoint, OpenCheckpoint(spec.checkpoint));
  ML_ASSIGN_OR_RETURN(CheckpointSkeleton skeleton, SkeletonForCheckpoint(checkpoint, spec.model));
  ModelView view;
  view.model = spec.model.empty() ? skeleton.skeleton.model : spec.model;
  view.origin = absl::StrCat("checkpoint ", checkpoint.dir);
  for (const std::string& file : checkpoint.files) {
    view.files[file] = FileRoute{file, absl::StrCat(checkpoint.dir, "/", file), 0, {}};
  }
  for (const TensorLayout& t : checkpoint.tensors) {
    view.files[t.file].size_bytes = std::max(view.files[t.file].size_bytes, t.end_offset);
    view.stored[t.name] = t;
  }
  TakeFromSkeleton(skeleton.skeleton, view);
  return view;
}

absl::StatusOr<ModelView> FromDaemon(const ModelSpec& spec) {
  ML_ASSIGN_OR_RETURN(ModelLayout layout, DaemonClient(spec.daemon).GetLayout(spec.model, spec.timeout));
  ModelView view;
  view.model = spec.model;
  view.origin = absl::StrCat("daemon ", spec.daemon);
  view.files = std::move(layout.files);
  for (TensorLayout& t : layout.tensors) view.stored[t.name] = std::move(t);
  view.init_missing = layout.init_missing.empty() ? "error" : layout.init_missing;
  view.answered_by = layout.answered_by;
  if (!layout.skeleton_json.empty()) {
    ML_ASSIGN_OR_RETURN(Skeleton skeleton, ParseSkeletonJson(layout.skeleton_json,
                                                             absl::StrCat("the skeleton of ", spec.model)));
    TakeFromSkeleton(skeleton, view);
  }
  return view;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// How one request gets its values, decided before anything is read.
struct Resolution {
  enum class Kind { kRead, kBuffer, kModule, kInit } kind = Kind::kRead;
  const TensorLayout* stored = nullptr;  // kRead
  std::string rule;                      // kBuffer
};

std::optional<std::string> BoxProblem(const MaterializeRequest& r) {
  if (!r.box.has_value()) return std::nullopt;
  const TensorBox& box = *r.box;
  if (box.start.size() != r.full_shape.size() || box.length.size() != r.full_shape.size()) {
    return absl::StrCat("its local part has ", box.start.size(), " dimensions, the tensor ",
                        r.full_shape.size());
  }
  for (size_t d = 0; d < box.start.size(); ++d) {
    if (box.start[d] < 0 || box.length[d] < 0 || box.start[d] > r.full_shape[d] ||
        box.length[d] > r.full_shape[d] - box.start[d]) {
      return absl::StrCat("its local part [", box.start[d], ", +", box.length[d], ") of dimension ", d,
                          " is outside the tensor's ", r.full_shape[d]);
    }
  }
  return std::nullopt;
}

// Resolves every request; a request that cannot be served becomes a finding.
std::vector<Resolution> Resolve(const ModelView& view, const std::vector<MaterializeRequest>& requests,
                                const InitPolicy& policy, std::vector<Finding>* refused) {
  std::vector<Resolution> out(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const MaterializeRequest& r = requests[i];
    if (std::optional<std::string> problem = BoxProblem(r)) {
      refused->push_back({r.name, *problem});
      continue;
    }
    auto alias = view.tied_to.find(r.name);
    auto stored = view.stored.find(alias == view.tied_to.end() ? r.name : alias->second);
    if (stored != view.stored.end()) {
      if (stored->second.shape != r.full_shape) {
        refused->push_back(
            {r.name,
             absl::StrCat("the module's shape ", ShapeText(r.full_shape), " differs from the checkpoint's ",
                          ShapeText(stored->second.shape), " (another size of this model?)")});
      }
      out[i].stored = &stored->second;
      continue;
    }
    auto rule = view.buffer_rules.find(r.name);
    if (r.is_buffer && rule != view.buffer_rules.end()) {
      out[i] = Resolution{Resolution::Kind::kBuffer, nullptr, rule->second};
    } else if (r.is_buffer) {
      out[i].kind = Resolution::Kind::kModule;
    } else if (policy.initializes()) {
      out[i].kind = Resolution::Kind::kInit;
    } else {
      refused->push_back({r.name, MissingTensorReason("init_missing=\"zeros\" or \"normal:STD\"")});
    }
  }
  return out;
}

// A computed buffer: the whole buffer from its rule, then the part held here.
absl::Status ComputeInto(const std::string& rule, MaterializeRequest& r) {
  if (!r.box.has_value()) return ComputeBuffer(rule, r.dest);
  at::Tensor whole;
  ML_RETURN_IF_ERROR(
      CallTorch("allocating a buffer", [&] { whole = torch::empty(r.full_shape, r.dest.options()); }));
  ML_RETURN_IF_ERROR(ComputeBuffer(rule, whole));
  return CallTorch(absl::StrCat("copying ", r.name), [&] {
    for (size_t d = 0; d < r.box->start.size(); ++d)
      whole = whole.narrow(d, r.box->start[d], r.box->length[d]);
    r.dest.copy_(whole);
  });
}

// Everything that is not read: computed buffers, initialized missing tensors.
void FillComputed(const std::vector<Resolution>& plan, const InitPolicy& policy,
                  std::vector<MaterializeRequest>& requests, std::vector<MaterializeResult>& results) {
  for (size_t i = 0; i < requests.size(); ++i) {
    MaterializeRequest& r = requests[i];
    absl::Status status;
    switch (plan[i].kind) {
      case Resolution::Kind::kRead:
        continue;
      case Resolution::Kind::kModule:
        results[i].provenance.kind = Provenance::Kind::kModule;
        continue;
      case Resolution::Kind::kBuffer:
        status = ComputeInto(plan[i].rule, r);
        results[i].provenance = Provenance{.kind = Provenance::Kind::kBuffer, .rule = plan[i].rule};
        break;
      case Resolution::Kind::kInit:
        status = InitializeMissing(policy, r.name, r.full_shape, r.box, r.dest);
        results[i].provenance = Provenance{.kind = Provenance::Kind::kInit, .rule = policy.ToString()};
        break;
    }
    results[i].filled = status.ok();
    if (!status.ok()) results[i].error = std::string(status.message());
  }
}

// The findings for people: tensors the checkpoint lacks grouped as `metactl check` groups them
// (a run of missing layers is one line, a tying mismatch is named), then every other finding.
std::vector<std::string> Summarize(const ModelView& view, const std::vector<MaterializeRequest>& requests,
                                   const std::vector<Finding>& refused) {
  const std::string missing_reason = MissingTensorReason("init_missing=\"zeros\" or \"normal:STD\"");
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

absl::StatusOr<ModelView> OpenModel(const ModelSpec& spec) {
  if (spec.daemon.empty() == spec.checkpoint.empty()) {
    return absl::InvalidArgumentError(
        "give either a daemon that has the model registered (daemon=host:port, or METAD_ADDRESS) or a "
        "checkpoint folder this host can read (checkpoint=PATH), not both");
  }
  return spec.checkpoint.empty() ? FromDaemon(spec) : FromCheckpoint(spec);
}

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
  const std::vector<Resolution> plan = Resolve(view, requests, policy, &outcome.refused);
  if (!outcome.refused.empty()) {
    outcome.summary = Summarize(view, requests, outcome.refused);
    return outcome;
  }
  outcome.results.resize(requests.size());
  if (settings.check_only) {
    for (size_t i = 0; i < requests.size(); ++i) {
      if (plan[i].kind == Resolution::Kind::kModule)
        outcome.results[i].provenance.kind = Provenance::Kind::kModule;
    }
    return outcome;
  }
  FillComputed(plan, policy, requests, outcome.results);

  std::vector<FillTarget> targets;
  std::vector<size_t> request_of;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (plan[i].kind != Resolution::Kind::kRead) continue;
    targets.push_back(FillTarget{requests[i].name, *plan[i].stored, requests[i].box, requests[i].dest});
    request_of.push_back(i);
  }
  const FillSettings fill{.model = view.model, .own_node = view.answered_by, .read = settings.read};
  ML_ASSIGN_OR_RETURN(FillOutcome filled, FillTargets(targets, view.files, fill));
  for (size_t j = 0; j < targets.size(); ++j) {
    MaterializeResult& result = outcome.results[request_of[j]];
    result = std::move(filled.results[j]);
    const std::string& stored_name = plan[request_of[j]].stored->name;
    if (stored_name != requests[request_of[j]].name) result.provenance.tied_to = stored_name;
  }
  outcome.direct_bytes = filled.direct_bytes;
  outcome.streamed_bytes = filled.streamed_bytes;
  return outcome;
}

}  // namespace metaload
