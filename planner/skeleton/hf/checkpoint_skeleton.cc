#include "planner/skeleton/hf/checkpoint_skeleton.h"

#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/skeleton/hf/hf_config.h"
#include "util/fs/location.h"

namespace metaload {
namespace {

constexpr char kConfigName[] = "config.json";

// True unless `checkpoint` is part of what its folder opens as (OpenCheckpoint(dir)): one
// shard of an index, or a file beside the folder's model.safetensors.
bool IsTheFoldersCheckpoint(const Checkpoint& checkpoint, const Storage& storage) {
  const std::string& dir = checkpoint.dir;
  if (storage.KindOrMissing(JoinLocation(dir, "model.safetensors")) == PathKind::kFile) {
    return checkpoint.files.size() == 1 && checkpoint.files.front() == "model.safetensors";
  }
  if (storage.KindOrMissing(JoinLocation(dir, "model.safetensors.index.json")) == PathKind::kFile) {
    absl::StatusOr<CheckpointIndex> index =
        ReadCheckpointIndex(JoinLocation(dir, "model.safetensors.index.json"), storage);
    if (!index.ok()) return false;  // then the folder opens as nothing: this is a lone file of it
    std::set<std::string> shards;
    for (const auto& [tensor, shard] : index->weight_map) shards.insert(shard);
    return shards == std::set<std::string>(checkpoint.files.begin(), checkpoint.files.end());
  }
  return true;  // the folder's only checkpoint, whatever its file is called
}

// "<path>: architecture \"X\" is not supported" out of SkeletonFromHfConfig's Unimplemented
// message, without its list and its advice (to derive: what is done here).
std::string UnsupportedReason(const absl::Status& status) {
  std::string reason(status.message());
  const size_t list = reason.find(" (supported: ");
  if (list != std::string::npos) reason.resize(list);
  return reason;
}

}  // namespace

absl::StatusOr<CheckpointSkeleton> SkeletonForCheckpoint(const Checkpoint& checkpoint,
                                                         absl::string_view model_name,
                                                         const Storage& storage) {
  CheckpointSkeleton out;
  const std::string name = model_name.empty() ? BaseNameOf(checkpoint.dir) : std::string(model_name);
  const std::string config_path = JoinLocation(checkpoint.dir, kConfigName);
  if (storage.KindOrMissing(config_path) == PathKind::kFile) out.config_path = config_path;

  if (!out.config_path.empty() && !IsTheFoldersCheckpoint(checkpoint, storage)) {
    out.notice = absl::StrCat(out.config_path, " describes the whole model, and the checkpoint is only ",
                              absl::StrJoin(checkpoint.files, ", "),
                              ": its skeleton is derived from its own safetensors headers");
  } else if (!out.config_path.empty()) {
    absl::StatusOr<Skeleton> built = SkeletonFromHfConfigFile(out.config_path, storage);
    if (built.ok()) {
      out.skeleton = *std::move(built);
      out.skeleton.model = name;
      out.origin = SkeletonOrigin::kHfConfig;
      return out;
    }
    if (!absl::IsUnimplemented(built.status())) return built.status();
    out.notice =
        absl::StrCat(UnsupportedReason(built.status()),
                     ", so the skeleton is derived from the safetensors headers, which show only the "
                     "ties safetensors' save_model recorded and no non-persistent buffers (add them "
                     "to a skeleton file if the model has any)");
  }
  out.skeleton = DeriveSkeleton(checkpoint, name);
  out.origin = SkeletonOrigin::kDerived;
  return out;
}

}  // namespace metaload
