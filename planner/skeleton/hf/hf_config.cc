// SkeletonFromHfConfig: finds the architecture's record (architecture_registry.h), hands the
// config to its builder (architectures/*.cc), and adds what every skeleton has (name, root
// module, size checks).
#include "planner/skeleton/hf/hf_config.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/skeleton/hf/architecture_registry.h"
#include "planner/skeleton/hf/hf_config_reader.h"
#include "util/fs/location.h"
#include "util/fs/storage.h"
#include "util/json/json_util.h"
#include "util/json/strict_json.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

using Json = nlohmann::json;

absl::Status UnsupportedError(absl::string_view source_name, absl::string_view what) {
  return absl::UnimplementedError(
      absl::StrCat(source_name, ": ", what,
                   " is not supported (supported: ", absl::StrJoin(SupportedHfArchitectures(), ", "),
                   "); derive the skeleton from the checkpoint instead: metactl skeleton CHECKPOINT_DIR"));
}

// The architecture and class: architectures[0] as transformers' AutoModel would use it, else
// model_type.
absl::StatusOr<HfClassMatch> FindArchitecture(const HfConfigReader& config) {
  if (const Json* architectures = config.FindTopLevelFirst("architectures")) {
    if (!architectures->is_array() || architectures->empty() || !(*architectures)[0].is_string()) {
      return config.KeyError("architectures", absl::StrCat("expected an array of class names, found ",
                                                           JsonForMessage(*architectures)));
    }
    const std::string name = (*architectures)[0].get<std::string>();
    const HfClassMatch match = FindHfArchitecture(name);
    if (match.architecture != nullptr) return match;
    return UnsupportedError(config.source_name(), absl::StrCat("architecture \"", name, "\""));
  }
  ML_ASSIGN_OR_RETURN(const std::string model_type, config.TopLevelStringOr("model_type", ""));
  if (model_type.empty()) {
    return config.Error(
        "has neither \"architectures\" nor \"model_type\"; is it a Hugging Face config.json?");
  }
  const HfClassMatch match = FindHfModelType(model_type);
  if (match.architecture != nullptr) return match;
  return UnsupportedError(config.source_name(), absl::StrCat("model_type \"", model_type, "\""));
}

}  // namespace

absl::StatusOr<Skeleton> SkeletonFromHfConfig(absl::string_view config_json, absl::string_view source_name) {
  ML_ASSIGN_OR_RETURN(const Json root, json_util::Parse(config_json, source_name));
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": expected a JSON object, found ", JsonForMessage(root)));
  }
  const HfConfigReader config(root, std::string(source_name));
  ML_ASSIGN_OR_RETURN(const HfClassMatch match, FindArchitecture(config));
  const HfClass& hf_class = *match.hf_class;
  const absl::string_view architecture =
      hf_class.loads_as.empty() ? hf_class.architecture : hf_class.loads_as;
  absl::StatusOr<Skeleton> built = match.architecture->build(config, architecture);
  if (!built.ok()) return built.status();
  Skeleton skeleton = *std::move(built);
  ML_RETURN_IF_ERROR(CheckSkeletonSize(skeleton, source_name));

  skeleton.architecture = std::string(architecture);
  // The folder a config.json sits in names the model the way users refer to it.
  skeleton.model = BaseNameOf(ParentOf(source_name));
  if (skeleton.model.empty() || skeleton.model == "." || skeleton.model == "..") {
    skeleton.model = skeleton.architecture;
  }
  skeleton.modules.insert(skeleton.modules.begin(),
                          SkeletonModule{"", skeleton.architecture, /*no_split=*/false});
  return skeleton;
}

absl::StatusOr<std::string> ReadHfConfigText(const std::string& path, const Storage& storage) {
  return ReadSmallFile(path, kMaxConfigFileBytes, "config.json", storage);
}

absl::StatusOr<Skeleton> SkeletonFromHfConfigFile(const std::string& path, const Storage& storage) {
  ML_ASSIGN_OR_RETURN(std::string text, ReadHfConfigText(path, storage));
  return SkeletonFromHfConfig(text, path);
}

bool LooksLikeHfConfig(const std::string& path) {
  if (BaseNameOf(path) == "config.json") return true;
  // Other names: peek inside, but only at files small enough to be a config; a skeleton file
  // has neither key ("architecture" is singular there).
  constexpr uint64_t kMaxPeekBytes = 1ull << 20;
  absl::StatusOr<std::string> text = ReadSmallFile(path, kMaxPeekBytes, "config");
  if (!text.ok()) return false;
  absl::StatusOr<Json> parsed = ParseJsonRejectingDuplicateKeys(*text);
  return parsed.ok() && parsed->is_object() &&
         (parsed->contains("architectures") || parsed->contains("model_type"));
}

}  // namespace metaload
