// The skeleton of a checkpoint: the one rule that `metactl skeleton`, `plan`, `check` and the
// daemon's registrar (RegisterModel without a skeleton) share.
//
//   ML_ASSIGN_OR_RETURN(Checkpoint ckpt, OpenCheckpoint("/models/qwen2.5-3b"));
//   ML_ASSIGN_OR_RETURN(CheckpointSkeleton s, SkeletonForCheckpoint(ckpt, "qwen"));
//   if (!s.notice.empty()) ...show it...;
//
// A folder that Hugging Face wrote holds a config.json beside the weights. It shows what the
// safetensors headers cannot: tied weights (a tied lm_head is not stored at all), the
// non-persistent buffers (rotary inv_freq) and how to compute them, the module types. So:
//   - `<dir>/config.json` of a supported architecture (SupportedHfArchitectures()): the skeleton
//     is built from it (planner/skeleton/hf/hf_config.h);
//   - no config.json: derived from the headers (DeriveSkeleton);
//   - a config.json of an architecture we cannot build (BertModel, say): derived from the
//     headers, and `notice` says so, for the caller to show: never silently;
//   - a config.json that is malformed or unreadable, or of a supported architecture with a
//     setting we cannot build (an unknown RoPE type): an error naming the file. Deriving then
//     would hide a broken download or drop buffers the model needs.
// A checkpoint that is only one file of its folder's checkpoint (one shard opened by name) is
// derived from its own headers: the config describes the whole model.
#ifndef METALOAD_PLANNER_SKELETON_HF_CHECKPOINT_SKELETON_H_
#define METALOAD_PLANNER_SKELETON_HF_CHECKPOINT_SKELETON_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/format/checkpoint.h"
#include "planner/skeleton/skeleton.h"

namespace metaload {

enum class SkeletonOrigin {
  kHfConfig,  // built from the folder's config.json
  kDerived,   // derived from the safetensors headers
};

struct CheckpointSkeleton {
  Skeleton skeleton;
  SkeletonOrigin origin = SkeletonOrigin::kDerived;
  // The config.json built from, or passed over (see `notice`); "" when the folder has none.
  std::string config_path;
  // One line saying why a config.json beside the checkpoint was not used; "" otherwise.
  std::string notice;
};

// `model_name` names the skeleton; empty: the checkpoint's folder name. Errors: as
// SkeletonFromHfConfigFile for `<checkpoint.dir>/config.json` (InvalidArgument naming the file
// and key; PermissionDenied; ...), except Unimplemented (an unsupported architecture), which
// falls back to derivation with a notice. config.json and the index are read through `storage`
// (a daemon's keeps to its roots: util/fs/storage.h).
absl::StatusOr<CheckpointSkeleton> SkeletonForCheckpoint(const Checkpoint& checkpoint,
                                                         absl::string_view model_name,
                                                         const Storage& storage = {});

}  // namespace metaload

#endif  // METALOAD_PLANNER_SKELETON_HF_CHECKPOINT_SKELETON_H_
