// Skeletons from Hugging Face `config.json` files: every parameter and buffer with shape
// and dtype, module structure, no-split decoder layers, tied groups and non-persistent
// buffers, for the architectures in SupportedHfArchitectures().
//
//   ML_ASSIGN_OR_RETURN(Skeleton s, SkeletonFromHfConfig(text, "llama/config.json"));
//
// Errors: InvalidArgument naming the file and key for a malformed config; Unimplemented for
// an architecture we do not know (the message lists the supported ones and points to
// `metactl skeleton CHECKPOINT_DIR`, which derives a skeleton from the checkpoint itself).
#ifndef METALOAD_PLANNER_SKELETON_HF_HF_CONFIG_H_
#define METALOAD_PLANNER_SKELETON_HF_HF_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/skeleton/skeleton.h"
#include "util/fs/storage.h"

namespace metaload {

// "LlamaForCausalLM", "MistralForCausalLM", ...: every registered architecture's classes
// (architecture_registry.h) but the old names, in table order.
std::vector<std::string> SupportedHfArchitectures();

absl::StatusOr<Skeleton> SkeletonFromHfConfig(absl::string_view config_json, absl::string_view source_name);

// The most a config file (config.json, generation_config.json) may hold: a few KB in practice,
// so that a weights file passed by mistake is refused unread, never read whole.
inline constexpr uint64_t kMaxConfigFileBytes = 16ull << 20;

// SkeletonFromHfConfig on the file at `path` (errors name it). Files over 16 MiB are refused
// unread: a config.json is a few KB, and a weights file passed by mistake must not be read whole.
// Read through `storage` (a daemon's keeps to its roots: util/fs/storage.h).
absl::StatusOr<Skeleton> SkeletonFromHfConfigFile(const std::string& path, const Storage& storage = {});
// The text of the config.json at `path`, by the same 16 MiB rule, through `storage`.
absl::StatusOr<std::string> ReadHfConfigText(const std::string& path, const Storage& storage = {});

// True when `path` names a Hugging Face config (a file called config.json, or a JSON
// object with "architectures" or "model_type").
bool LooksLikeHfConfig(const std::string& path);

}  // namespace metaload

#endif  // METALOAD_PLANNER_SKELETON_HF_HF_CONFIG_H_
