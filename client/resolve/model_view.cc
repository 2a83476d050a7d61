#include "client/resolve/model_view.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "planner/format/checkpoint.h"
#include "planner/format/digest_manifest.h"
#include "planner/format/quantization.h"
#include "planner/skeleton/hf/checkpoint_skeleton.h"
#include "planner/skeleton/hf/hf_config.h"
#include "planner/skeleton/skeleton.h"
#include "util/fs/storage.h"
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

// The quantization a config.json's text declares, and the stored codes and scales it pairs.
absl::Status TakeQuantization(const std::string& config_json, const std::string& where, ModelView& view) {
  if (config_json.empty()) return absl::OkStatus();
  ML_ASSIGN_OR_RETURN(view.quantization, ParseQuantization(config_json, where));
  if (!view.quantization.has_value()) return absl::OkStatus();
  std::vector<TensorLayout> stored;
  for (const auto& [name, t] : view.stored) stored.push_back(t);
  view.quantized = FindQuantized(*view.quantization, stored);
  return absl::OkStatus();
}

absl::StatusOr<ModelView> FromCheckpoint(const ModelSpec& spec) {
  ML_ASSIGN_OR_RETURN(Checkpoint checkpoint, OpenCheckpoint(spec.checkpoint));
  // The folder's own digests (`metactl digest`), when its files are still as they were hashed.
  ML_ASSIGN_OR_RETURN(std::string digest_note, ApplyDigestManifest(checkpoint));
  ML_ASSIGN_OR_RETURN(CheckpointSkeleton skeleton, SkeletonForCheckpoint(checkpoint, spec.model));
  ModelView view;
  view.model = spec.model.empty() ? skeleton.skeleton.model : spec.model;
  view.origin = absl::StrCat("checkpoint ", checkpoint.dir);
  view.digest_note = std::move(digest_note);
  for (const std::string& file : checkpoint.files) {
    view.files[file] = FileRoute{file, absl::StrCat(checkpoint.dir, "/", file), 0, {}};
  }
  for (const TensorLayout& t : checkpoint.tensors) {
    view.files[t.file].size_bytes = std::max(view.files[t.file].size_bytes, t.end_offset);
    view.stored[t.name] = t;
  }
  TakeFromSkeleton(skeleton.skeleton, view);
  if (!skeleton.config_path.empty()) {
    ML_ASSIGN_OR_RETURN(std::string config,
                        ReadSmallFile(skeleton.config_path, kMaxConfigFileBytes, "config.json"));
    ML_RETURN_IF_ERROR(TakeQuantization(config, skeleton.config_path, view));
  }
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
  view.hf_config_json = std::move(layout.hf_config_json);
  view.proof_required = layout.proof_required;
  if (!layout.skeleton_json.empty()) {
    ML_ASSIGN_OR_RETURN(Skeleton skeleton, ParseSkeletonJson(layout.skeleton_json,
                                                             absl::StrCat("the skeleton of ", spec.model)));
    TakeFromSkeleton(skeleton, view);
  }
  ML_RETURN_IF_ERROR(
      TakeQuantization(view.hf_config_json, absl::StrCat("the config.json of ", spec.model), view));
  return view;
}

}  // namespace

absl::StatusOr<ModelView> OpenModel(const ModelSpec& spec) {
  if (spec.daemon.empty() && spec.checkpoint.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "neither a daemon nor a checkpoint for ", spec.model,
        ": give checkpoint=PATH (a folder of safetensors this host can read), or daemon=host:port (or set "
        "METAD_ADDRESS) of a daemon that has it registered"));
  }
  if (!spec.daemon.empty() && !spec.checkpoint.empty()) {
    return absl::InvalidArgumentError(
        "give either a daemon that has the model registered (daemon=host:port, or METAD_ADDRESS) or a "
        "checkpoint folder this host can read (checkpoint=PATH), not both");
  }
  return spec.checkpoint.empty() ? FromDaemon(spec) : FromCheckpoint(spec);
}

}  // namespace metaload
