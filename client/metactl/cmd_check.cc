// `metactl check SKELETON_OR_CONFIG CHECKPOINT`: the meta doctor. Says, before any GPU is
// touched, which tensors would stay on the meta device and why, with the fix, by matching a
// skeleton against a checkpoint (planner/doctor/match.h) and explaining the result
// (planner/doctor/check_report.h). Works on an index whose weights are not downloaded yet, by name;
// reports the shards an interrupted download left out.
#include <optional>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/metactl/commands.h"
#include "client/metactl/offline_common.h"
#include "planner/doctor/check_report.h"
#include "planner/doctor/match.h"
#include "planner/doctor/quantized_match.h"
#include "planner/format/checkpoint.h"
#include "planner/format/quantization.h"
#include "planner/skeleton/dequantized_skeleton.h"
#include "util/cli_args.h"
#include "util/fs/location.h"
#include "util/fs/storage.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// The report for CHECKPOINT: the full checkpoint when its files are there. Else, when its
// index is readable: by name when none of the weights it names are there (not downloaded yet)
// or they are .bin files; and when some shards are there and others not (an interrupted
// download), the absent shards' tensors would stay on meta: never "OK" for a folder that
// inspect, plan and register refuse.
absl::StatusOr<MatchReport> MatchAgainst(const Skeleton& skeleton, const std::string& checkpoint_path) {
  absl::StatusOr<Checkpoint> checkpoint = OpenCheckpoint(checkpoint_path);
  if (checkpoint.ok()) return MatchSkeleton(skeleton, *checkpoint);
  if (!absl::IsNotFound(checkpoint.status())) return checkpoint.status();
  absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex(checkpoint_path);
  if (!index.ok()) return checkpoint.status();  // says what was looked for, and about .bin

  const std::string dir = ParentOf(index->path);
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : index->weight_map) shards.insert(shard);
  std::set<std::string> absent;
  bool bin = absl::EndsWith(index->path, ".bin.index.json");
  for (const std::string& shard : shards) {
    absl::StatusOr<PathKind> kind = Storage().KindOf(JoinLocation(dir, shard));
    if (kind.ok() && *kind == PathKind::kMissing) absent.insert(shard);
    bin = bin || absl::EndsWith(shard, ".bin");
  }
  if (!shards.empty() && absent.size() == shards.size()) {
    return MatchSkeletonNames(skeleton, *index, "only the index is present");
  }
  if (bin) {
    return MatchSkeletonNames(
        skeleton, *index,
        "the weights are PyTorch .bin files, which metaload does not read (convert them to safetensors)");
  }
  if (!absent.empty()) return MatchSkeletonPartialDownload(skeleton, *index, absent);
  return checkpoint.status();  // every shard is there: the checkpoint's own error is the one to report
}

absl::StatusOr<int> Check(const CliArgs& args) {
  ML_RETURN_IF_ERROR(args.ExpectPositionals(
      2, 2, "SKELETON_OR_CONFIG (a skeleton file, a config.json or a checkpoint folder) and CHECKPOINT"));
  const std::string format = args.GetOr("format", "table");
  ML_RETURN_IF_ERROR(CheckChoice("--format", format, {"table", "json"}));
  const std::string& model_path = args.positionals()[0];
  const std::string& checkpoint_path = args.positionals()[1];

  const bool dequantize = args.Has("dequantize");
  // A config.json goes through ReadModelSource's Hugging Face dispatch, the one place that
  // turns configs into skeletons for every offline command.
  ML_RETURN_IF_ERROR(CheckNotAModelName("check", checkpoint_path));
  ML_ASSIGN_OR_RETURN(ModelSource source,
                      ReadModelSource("check", model_path, "", /*accept_skeleton_file=*/true));
  // `check DIR DIR` (the folder's own skeleton against its files) has read the checkpoint
  // already: reading 100k tensors' headers again was a third of the command.
  std::optional<Checkpoint> opened;
  const Checkpoint* checkpoint = nullptr;
  if (source.checkpoint.has_value() && model_path == checkpoint_path) {
    checkpoint = &*source.checkpoint;
  } else if (absl::StatusOr<Checkpoint> read = OpenCheckpoint(checkpoint_path); read.ok()) {
    opened = *std::move(read);
    checkpoint = &*opened;
  }
  // The quantization is the checkpoint's: its folder's config.json says how its codes are read.
  const std::string checkpoint_dir = checkpoint != nullptr ? checkpoint->dir
                                     : Storage().KindOrMissing(checkpoint_path) == PathKind::kFolder
                                         ? checkpoint_path
                                         : ParentOf(checkpoint_path);
  ML_ASSIGN_OR_RETURN(DeclaredQuantization declared, ReadDeclaredQuantization(checkpoint_dir));
  // A skeleton derived from a quantized checkpoint's headers names codes and scales; a dequantizing
  // load fills the BF16 module of their values instead.
  const Skeleton* skeleton = &source.skeleton;
  Skeleton dequantized;
  if (dequantize && source.derived_from_headers && checkpoint != nullptr &&
      declared.quantization.has_value() && declared.quantization->scheme.has_value()) {
    dequantized = DequantizedSkeleton(
        source.skeleton, FindQuantized(*declared.quantization, checkpoint->tensors), DType::kBF16);
    skeleton = &dequantized;
  }
  ML_ASSIGN_OR_RETURN(MatchReport report, checkpoint != nullptr ? MatchSkeleton(*skeleton, *checkpoint)
                                                                : MatchAgainst(*skeleton, checkpoint_path));
  MatchQuantization(*skeleton,
                    checkpoint != nullptr && report.shapes_checked ? &checkpoint->tensors : nullptr,
                    declared.quantization, declared.config_path, dequantize, &report);
  const CheckSubject subject{model_path, checkpoint_path, source.skeleton.model, !args.Has("no-strict")};
  ML_RETURN_IF_ERROR(WriteOutput(args.GetOr("output", "-"), format == "json"
                                                                ? CheckReportToJson(report, subject)
                                                                : CheckReportToText(report, subject)));
  return CheckPasses(report, subject.strict) ? kExitOk : kExitVerifyFailed;
}

}  // namespace

int RunCheck(int argc, char** argv) {
  CliArgs args(
      "metactl check", "SKELETON_OR_CONFIG CHECKPOINT [--format table|json] [--no-strict] [-o FILE]",
      "The meta doctor: says, before any GPU is touched, which tensors would stay on the meta device\n"
      "when the model is loaded from CHECKPOINT, and the fix for each. Reports tensors the checkpoint\n"
      "lacks (a new head), shape and dtype mismatches, unexpected checkpoint tensors (quantization\n"
      "state, rotary inv_freq saved by older versions, another architecture), how tied groups and\n"
      "non-persistent buffers will be resolved; ends with a one-line verdict.\n"
      "SKELETON_OR_CONFIG is a skeleton file (model.json), a Hugging Face config.json, or a checkpoint\n"
      "folder (its skeleton as `metactl skeleton` gives it: from the folder's config.json when\n"
      "supported, else derived). CHECKPOINT is a checkpoint folder, .safetensors file or index;\n"
      "a folder holding only its index (weights not downloaded) is checked by name only; one where\n"
      "some shards are missing (an interrupted download) reports their tensors as staying on meta.\n"
      "A quantized checkpoint (a quantization_config in its config.json, or FP8/U8 codes with\n"
      "scales beside them) is named with what metaload can do with it; codes that a load would\n"
      "read as a floating-point module's values are refused (exit 3) unless --dequantize.");
  args.Flag("format", "FORMAT", "table (default): findings for people; json: see docs/cli.md");
  args.Flag("output", "FILE", "write the report to FILE instead of stdout", 'o');
  args.Switch("dequantize",
              "judge as a dequantizing load would (`metactl load --dequantize`, dequantize=True): FP8\n"
              "weights with their scales fill a floating-point module's tensors, MXFP4 x_blocks and\n"
              "x_scales its x, and the scales are consumed; a weight without its scale, or a scale\n"
              "of the wrong shape, is an error. A folder without a supported config.json is judged as\n"
              "the BF16 module of its values. Methods metaload does not read (bitsandbytes, GPTQ,\n"
              "AWQ...) are refused with or without it");
  args.Switch("no-strict",
              "judge as `metactl register --no-strict` would: unexpected checkpoint tensors reported, not\n"
              "refused");
  args.Epilog(
      "exit codes: 0 register and load would accept the pair: nothing would stay on meta, and the\n"
      "checkpoint holds nothing the skeleton has no place for (rotary inv_freq and buffers older\n"
      "versions persisted are ignored; with --no-strict every unexpected tensor is only reported);\n"
      "3 some tensor would stay on meta, unexpected tensors would be refused, quantized codes would\n"
      "be read as values (without --dequantize), the quantization is one metaload does not read, or\n"
      "(--dequantize) a stored tensor of it cannot be dequantized; 2 bad input.\n\n"
      "examples:\n"
      "  metactl check llama-8b.json /models/llama-8b\n"
      "  metactl check /models/llama-8b/config.json /models/llama-8b --format json\n"
      "  metactl check /models/deepseek-v3 /models/deepseek-v3 --dequantize   # an FP8 checkpoint");
  if (std::optional<int> exit_code = ParseArgsOrExitCode("check", args, argc, argv)) return *exit_code;
  absl::StatusOr<int> exit_code = Check(args);
  if (!exit_code.ok()) return ReportAndExitCode("check", exit_code.status());
  return *exit_code;
}

}  // namespace metaload
