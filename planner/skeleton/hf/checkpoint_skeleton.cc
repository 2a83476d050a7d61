#include "planner/skeleton/hf/checkpoint_skeleton.h"

#include <filesystem>
#include <set>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/skeleton/hf/hf_config.h"

namespace metaload {
namespace {

namespace fs = std::filesystem;

constexpr char kConfigName[] = "config.json";

bool IsRegularFile(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

// True unless `checkpoint` is part of what its folder opens as (OpenCheckpoint(dir)): one
// shard of an index, or a file beside the folder's model.safetensors.
bool IsTheFoldersCheckpoint(const Checkpoint& checkpoint, const FileOpener& open) {
  const fs::path dir(checkpoint.dir);
  if (IsRegularFile(dir / "model.safetensors")) {
    return checkpoint.files.size() == 1 && checkpoint.files.front() == "model.safetensors";
  }
  if (IsRegularFile(dir / "model.safetensors.index.json")) {
    absl::StatusOr<CheckpointIndex> index =
        ReadCheckpointIndex((dir / "model.safetensors.index.json").string(), open);
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
                                                         const FileOpener& open) {
  CheckpointSkeleton out;
  const std::string name =
      model_name.empty() ? fs::path(checkpoint.dir).filename().string() : std::string(model_name);
  const fs::path config_path = fs::path(checkpoint.dir) / kConfigName;
  if (IsRegularFile(config_path)) out.config_path = config_path.string();

  if (!out.config_path.empty() && !IsTheFoldersCheckpoint(checkpoint, open)) {
    out.notice = absl::StrCat(out.config_path, " describes the whole model, and the checkpoint is only ",
                              absl::StrJoin(checkpoint.files, ", "),
                              ": its skeleton is derived from its own safetensors headers");
  } else if (!out.config_path.empty()) {
    absl::StatusOr<Skeleton> built = SkeletonFromHfConfigFile(out.config_path, open);
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
