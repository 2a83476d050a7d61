// Helpers shared by metactl's offline subcommands (inspect, skeleton, plan, check, synth) and
// register: flag parsing with the exit-code rules of commands.h, writing a result to a file or
// stdout, and turning a MODEL argument (checkpoint folder, skeleton file, Hugging Face
// config.json) into a skeleton.
//
//   CliArgs args("metactl inspect", "PATH [flags]", "Lists the tensors of a checkpoint.");
//   if (std::optional<int> exit_code = ParseArgsOrExitCode("inspect", args, argc, argv)) return *exit_code;
//   return ReportAndExitCode("inspect", Inspect(args));
//
// Header-only (inline) so that it needs no line in client/CMakeLists.txt of its own.
#ifndef METALOAD_CLIENT_METACTL_OFFLINE_COMMON_H_
#define METALOAD_CLIENT_METACTL_OFFLINE_COMMON_H_

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "client/metactl/commands.h"
#include "planner/format/checkpoint.h"
#include "planner/format/quantization.h"
#include "planner/skeleton/hf/checkpoint_skeleton.h"
#include "planner/skeleton/hf/hf_config.h"
#include "planner/skeleton/skeleton.h"
#include "util/cli_args.h"
#include "util/fs/file_io.h"
#include "util/fs/location.h"
#include "util/fs/storage.h"
#include "util/status_macros.h"

namespace metaload {

// `value` must be one of `allowed`; InvalidArgument naming the flag and the choices otherwise.
inline absl::Status CheckChoice(absl::string_view flag, const std::string& value,
                                std::initializer_list<absl::string_view> allowed) {
  for (absl::string_view choice : allowed) {
    if (value == choice) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown ", flag, " \"", value, "\" (choose one of: ", absl::StrJoin(allowed, ", "), ")"));
}

// Writes `text` to `path`, or to stdout when `path` is empty or "-". A file is written under a
// temporary name and renamed into place, so a failed run never leaves half a model.json.
inline absl::Status WriteOutput(const std::string& path, absl::string_view text) {
  if (path.empty() || path == "-") {
    std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
    std::cout.flush();
    if (!std::cout) return absl::UnavailableError("cannot write to stdout");
    return absl::OkStatus();
  }
  const std::string temp_path = absl::StrCat(path, ".tmp");
  std::FILE* file = std::fopen(temp_path.c_str(), "wb");
  if (file == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  const int write_errno = errno;
  if (std::fclose(file) != 0 || !written) {
    std::remove(temp_path.c_str());
    return absl::ErrnoToStatus(write_errno, absl::StrCat("cannot write ", path));
  }
  if (std::rename(temp_path.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(temp_path.c_str());
    return absl::ErrnoToStatus(rename_errno, absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

// Prints "metactl <command>: note: <text>" on stderr: something the user should know that is
// not an error (stdout stays the command's output).
inline void PrintNote(const char* command, absl::string_view text) {
  std::cerr << "metactl " << command << ": note: " << text << "\n";
}

// True for an argument that names no file and looks like a model's name rather than a path:
// no '/', only the characters a registered name may hold (letters, digits, '-', '_', '.'), and
// no extension of the files metactl reads (.json, .safetensors, .yaml).
inline bool LooksLikeModelName(const std::string& argument) {
  if (argument.empty() || argument.find('/') != std::string::npos) return false;
  for (char c : argument) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  }
  for (absl::string_view extension : {".json", ".safetensors", ".yaml", ".yml", ".bin"}) {
    if (absl::EndsWith(argument, extension)) return false;
  }
  absl::StatusOr<PathKind> kind = Storage().KindOf(argument);
  return kind.ok() && *kind == PathKind::kMissing;
}

// NotFound for a MODEL or PATH argument that names no file but looks like a registered model's
// name (a forgotten --daemon): says so, and what to do for `command`. OK otherwise (the file's
// own reader reports other problems).
inline absl::Status CheckNotAModelName(const char* command, const std::string& argument) {
  if (!LooksLikeModelName(argument)) return absl::OkStatus();
  std::string hint;
  if (absl::string_view(command) == "plan") {
    const char* env = std::getenv("METAD_ADDRESS");
    // Offline planning is the default, so METAD_ADDRESS alone does not switch to the daemon.
    hint = absl::StrCat("pass --daemon ADDR to show the plan a daemon gives its ranks",
                        env != nullptr && *env != '\0' ? absl::StrCat(" (METAD_ADDRESS is ", env, ")") : "");
  } else {
    hint =
        absl::StrCat("metactl ", command,
                     " reads files only: pass a checkpoint folder or file (`metactl status`, with --daemon "
                     "ADDR or METAD_ADDRESS, lists the registered models and their checkpoint folders)");
  }
  return absl::NotFoundError(absl::StrCat(argument,
                                          ": no such file or folder; it looks like a registered model's "
                                          "name: ",
                                          hint));
}

// A folder without weights but with a config.json (downloaded without them, or not yet): the
// status says that `metactl <command> DIR/config.json` reads the config alone, for the commands
// whose MODEL may be a config. Other statuses, and folders without a config.json, as they are.
inline absl::Status WithConfigHint(const char* command, const std::string& dir, const absl::Status& status) {
  const std::string config = JoinLocation(dir, "config.json");
  if (Storage().KindOrMissing(dir) != PathKind::kFolder ||
      Storage().KindOrMissing(config) != PathKind::kFile) {
    return status;
  }
  const absl::string_view c = command;
  const std::string what =
      c == "plan"       ? absl::StrCat("`metactl plan ", config, " --gpus N` plans from it alone")
      : c == "skeleton" ? absl::StrCat("`metactl skeleton ", config, "` builds the skeleton from it")
      : c == "check" ? absl::StrCat("`metactl check ", config, " CHECKPOINT` checks it against a checkpoint")
                     : "";
  if (what.empty()) return status;
  return Restated(status, status.code(),
                  absl::StrCat(status.message(), "; the folder has a config.json: ", what));
}

// A model as a MODEL argument names it: always a skeleton, plus the checkpoint it came from
// when the argument was a checkpoint (then the plan can name files and byte ranges).
struct ModelSource {
  Skeleton skeleton;
  std::optional<Checkpoint> checkpoint;
  // The skeleton was derived from the checkpoint's headers (no config.json we can build): it names
  // what is stored (a quantized checkpoint's codes and scales), not a module anyone builds.
  bool derived_from_headers = false;
};

// A Hugging Face config.json: the skeleton transformers would build from it
// (planner/skeleton/hf/hf_config.h), named `name`, or after the config's folder when `name` is empty. No
// checkpoint: a config names no files. An architecture we cannot build is Unimplemented (exit 2), pointing to
// `metactl skeleton CHECKPOINT_DIR`.
inline absl::StatusOr<ModelSource> ModelFromHfConfig(const std::string& path, const std::string& name) {
  ML_ASSIGN_OR_RETURN(Skeleton skeleton, SkeletonFromHfConfigFile(path));
  if (!name.empty()) skeleton.model = name;
  return ModelSource{std::move(skeleton), std::nullopt};
}

// A checkpoint (folder, .safetensors file or .safetensors.index.json) and its skeleton: from
// the folder's config.json when it has one we can build, else derived from the headers
// (planner/skeleton/hf/checkpoint_skeleton.h; a config.json passed over is noted on stderr). The model is
// named `name`, or after the checkpoint's folder when `name` is empty.
inline absl::StatusOr<ModelSource> ModelFromCheckpoint(const char* command, const std::string& path,
                                                       const std::string& name) {
  absl::StatusOr<Checkpoint> opened = OpenCheckpoint(path);
  if (absl::IsNotFound(opened.status())) return WithConfigHint(command, path, opened.status());
  ML_ASSIGN_OR_RETURN(Checkpoint checkpoint, std::move(opened));
  ML_ASSIGN_OR_RETURN(CheckpointSkeleton derived, SkeletonForCheckpoint(checkpoint, name));
  if (!derived.notice.empty()) PrintNote(command, derived.notice);
  ModelSource source;
  source.skeleton = std::move(derived.skeleton);
  source.checkpoint = std::move(checkpoint);
  source.derived_from_headers = derived.origin == SkeletonOrigin::kDerived;
  return source;
}

// A skeleton JSON file (docs/skeleton-format.md). Skeletons of the largest models are a few
// MB; the cap keeps a weights file passed by mistake from being read into memory whole.
inline absl::StatusOr<ModelSource> ModelFromSkeletonFile(const std::string& path) {
  constexpr uint64_t kMaxSkeletonFileBytes = 256ull << 20;
  ML_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, kMaxSkeletonFileBytes, "skeleton file"));
  ML_ASSIGN_OR_RETURN(Skeleton skeleton, ParseSkeletonJson(text, path));
  return ModelSource{std::move(skeleton), std::nullopt};
}

// Dispatches a MODEL argument of `metactl <command>`: a Hugging Face config (a file named
// config.json, or a JSON object with "architectures" or "model_type") -> ModelFromHfConfig;
// another file that is neither *.safetensors nor *.safetensors.index.json -> a skeleton file
// when `accept_skeleton_file`; anything else (a folder, above all) -> a checkpoint. An argument
// that names nothing but looks like a model's name gets CheckNotAModelName's hint.
inline absl::StatusOr<ModelSource> ReadModelSource(const char* command, const std::string& path,
                                                   const std::string& name, bool accept_skeleton_file) {
  ML_RETURN_IF_ERROR(CheckNotAModelName(command, path));
  const bool is_file = Storage().KindOrMissing(path) == PathKind::kFile;
  if (is_file && !absl::EndsWith(path, ".safetensors") && LooksLikeHfConfig(path)) {
    return ModelFromHfConfig(path, name);
  }
  if (accept_skeleton_file && is_file && !absl::EndsWith(path, ".safetensors") &&
      !absl::EndsWith(path, ".safetensors.index.json")) {
    return ModelFromSkeletonFile(path);
  }
  return ModelFromCheckpoint(command, path, name);
}

// What a checkpoint's config.json declares about its quantization (planner/format/quantization.h).
struct DeclaredQuantization {
  std::string config_path;  // "" when the folder has no config.json
  std::optional<Quantization> quantization;
};

// The quantization_config of `dir`/config.json: none when the folder has no config.json or it
// declares none; InvalidArgument naming the file when it is malformed.
inline absl::StatusOr<DeclaredQuantization> ReadDeclaredQuantization(const std::string& dir) {
  DeclaredQuantization out;
  const std::string path = JoinLocation(dir, "config.json");
  if (Storage().KindOrMissing(path) != PathKind::kFile) return out;
  out.config_path = path;
  ML_ASSIGN_OR_RETURN(std::string text, ReadHfConfigText(path));
  ML_ASSIGN_OR_RETURN(out.quantization, ParseQuantization(text, path));
  return out;
}

}  // namespace metaload

#endif  // METALOAD_CLIENT_METACTL_OFFLINE_COMMON_H_
