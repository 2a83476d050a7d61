// `metactl plan MODEL --gpus N ...`: a cluster-wide device map computed offline, with no
// daemon, so that a user sees before launching 16 ranks whether and how the model fits.
#include <string>

#include "absl/strings/str_cat.h"
#include "client/metactl/commands.h"
#include "client/metactl/offline_common.h"
#include "client/read/daemon_client.h"
#include "planner/format/checkpoint.h"
#include "planner/format/quantization.h"
#include "planner/plan/cluster.h"
#include "planner/plan/plan.h"
#include "planner/skeleton/dequantized_skeleton.h"
#include "planner/strategy/fit.h"
#include "planner/strategy/hf_device_map.h"
#include "planner/strategy/plan_table.h"
#include "planner/strategy/strategy.h"
#include "planner/strategy/strategy_flags.h"
#include "util/cli_args.h"
#include "util/error_kind.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

// Large enough for any cluster anyone will plan for, small enough that counts stay ints.
constexpr int64_t kMaxGpus = 1 << 20;

// "2 nodes × 8 GPUs × 80.00 GiB" (nodes of equal size), else one entry per node.
std::string ClusterSummary(const Cluster& cluster) {
  bool uniform = true;
  for (const NodeSpec& node : cluster.nodes) {
    uniform = uniform && node.gpu_count == cluster.nodes.front().gpu_count &&
              node.gpu_memory_bytes == cluster.nodes.front().gpu_memory_bytes;
  }
  if (uniform) {
    const NodeSpec& node = cluster.nodes.front();
    return absl::StrCat(cluster.nodes.size(), cluster.nodes.size() == 1 ? " node" : " nodes", " \xC3\x97 ",
                        node.gpu_count, node.gpu_count == 1 ? " GPU" : " GPUs", " \xC3\x97 ",
                        FormatBytes(node.gpu_memory_bytes));
  }
  std::string out;
  for (const NodeSpec& node : cluster.nodes) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", node.name, ": ", node.gpu_count, " \xC3\x97 ",
                    FormatBytes(node.gpu_memory_bytes));
  }
  return out;
}

// "quantization: ...\n": what the values of a quantized checkpoint weigh as stored and dequantized,
// and which of the two the plan counts.
std::string QuantizationLine(const Quantization& q, const QuantizedSet& set, DType held, bool dequantize) {
  uint64_t stored_bytes = 0, held_bytes = 0;
  for (const auto& [name, value] : set.values) {
    stored_bytes += value.StoredBytes();
    held_bytes += static_cast<uint64_t>(NumElements(value.shape)) * DTypeSizeBytes(held);
  }
  const std::string values = absl::StrCat(set.values.size(), set.values.size() == 1 ? " value" : " values");
  return absl::StrCat(
      "quantization: ", q.Description(), "; ", values, ": ", FormatBytes(stored_bytes),
      " stored as codes and scales, ", FormatBytes(held_bytes), " held in ", DTypeCode(held),
      dequantize ? " (--dequantize: planned held in it, read as codes and scales)\n"
                 : " once dequantized (planned as stored codes, not converted; --dequantize plans them "
                   "dequantized)\n");
}

// `--daemon ADDR`: the plan the coordinator hands the ranks of a registered model — the one
// `metactl load` will execute, with the cluster's real node names.
absl::Status PlanFromDaemon(const CliArgs& args) {
  ML_RETURN_IF_ERROR(args.ExpectPositionals(1, 1, "one registered model NAME"));
  for (const char* offline_only : {"nodes", "gpu-memory", "checkpoint"}) {
    if (args.Has(offline_only)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", offline_only, " is for offline planning; with --daemon the cluster is the joined nodes"));
    }
  }
  ML_ASSIGN_OR_RETURN(int64_t world_size, args.GetInt("gpus", 0, 0, kMaxGpus));
  const std::string format = args.GetOr("format", "table");
  if (format == "hf-device-map") {
    return absl::InvalidArgumentError(
        "--format hf-device-map is for offline planning (metactl plan MODEL --gpus N --format "
        "hf-device-map), "
        "not with --daemon");
  }
  ML_RETURN_IF_ERROR(CheckChoice("--format", format, {"table", "json"}));
  ML_ASSIGN_OR_RETURN(StrategyOptions options, ParseStrategyFlags(args));
  // The coordinator pairs the codes and scales from the config.json it registered.
  options.dequantize = args.Has("dequantize");
  DaemonClient daemon(*args.Get("daemon"));
  ML_ASSIGN_OR_RETURN(Assignment assignment,
                      daemon.GetPlan(args.positionals().front(), static_cast<int>(world_size), options,
                                     std::nullopt, absl::Seconds(30)));
  if (format == "json") return WriteOutput(args.GetOr("output", "-"), PlanToJson(assignment.plan));
  std::string text = absl::StrCat("plan from the coordinator (asked ", assignment.answered_by, " at ",
                                  daemon.address(), ")\n", PlanToTable(assignment.plan));
  return WriteOutput(args.GetOr("output", "-"), text);
}

absl::Status PlanModel(const CliArgs& args) {
  if (args.Has("daemon")) return PlanFromDaemon(args);
  ML_RETURN_IF_ERROR(args.ExpectPositionals(1, 1, "one MODEL (a skeleton file or a checkpoint folder)"));
  // Flags first: they are cheap to check, and a typo should not wait for a model to load.
  if (!args.Has("gpus"))
    return absl::InvalidArgumentError("--gpus N is required (the number of ranks to plan for)");
  ML_ASSIGN_OR_RETURN(int64_t gpus, args.GetInt("gpus", 0, 1, kMaxGpus));
  ML_ASSIGN_OR_RETURN(int64_t nodes, args.GetInt("nodes", 0, 1, kMaxGpus));
  uint64_t gpu_memory_bytes = kDefaultGpuMemoryBytes;
  if (std::optional<std::string> text = args.Get("gpu-memory")) {
    absl::StatusOr<uint64_t> parsed = ParseByteSize(*text);
    if (!parsed.ok()) return Annotate(parsed.status(), "--gpu-memory");
    gpu_memory_bytes = *parsed;
  }
  const std::string format = args.GetOr("format", "table");
  ML_RETURN_IF_ERROR(CheckChoice("--format", format, {"table", "json", "hf-device-map"}));
  ML_ASSIGN_OR_RETURN(StrategyOptions options, ParseStrategyFlags(args));
  ML_ASSIGN_OR_RETURN(Cluster cluster,
                      MakeUniformCluster(static_cast<int>(gpus), static_cast<int>(nodes), gpu_memory_bytes));

  const std::string& model_path = args.positionals().front();
  ML_ASSIGN_OR_RETURN(ModelSource source,
                      ReadModelSource("plan", model_path, "", /*accept_skeleton_file=*/true));
  if (std::optional<std::string> checkpoint_dir = args.Get("checkpoint")) {
    if (source.checkpoint.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--checkpoint is for a skeleton file or config.json; MODEL ", model_path,
                       " is already a checkpoint"));
    }
    ML_ASSIGN_OR_RETURN(source.checkpoint, OpenCheckpoint(*checkpoint_dir));
  }

  // A quantized checkpoint: its values planned as stored codes, or (--dequantize) held in the target
  // dtype and read as codes and scales.
  std::optional<DeclaredQuantization> declared;
  if (source.checkpoint.has_value()) {
    absl::StatusOr<DeclaredQuantization> read = ReadDeclaredQuantization(source.checkpoint->dir);
    // Without --dequantize the quantization only adds a line: a config.json it cannot read plans as
    // it always did.
    if (!read.ok() && args.Has("dequantize")) return read.status();
    if (read.ok()) declared = *std::move(read);
  }
  const bool readable = declared.has_value() && declared->quantization.has_value() &&
                        declared->quantization->scheme.has_value();
  QuantizedSet quantized;
  if (readable) quantized = FindQuantized(*declared->quantization, source.checkpoint->tensors);
  const DType held = options.load_dtype.value_or(DType::kBF16);
  if (args.Has("dequantize")) {
    if (!source.checkpoint.has_value()) {
      return absl::InvalidArgumentError(
          "--dequantize needs the checkpoint: MODEL a checkpoint folder, or --checkpoint DIR");
    }
    if (!readable) {
      return absl::InvalidArgumentError(
          absl::StrCat("--dequantize: ",
                       !declared.has_value() || declared->config_path.empty()
                           ? source.checkpoint->dir + "/config.json (absent)"
                           : declared->config_path,
                       " declares no quantization metaload reads",
                       declared.has_value() && declared->quantization.has_value()
                           ? absl::StrCat(" (", declared->quantization->Capability(), ")")
                           : "",
                       "; `metactl check` says what the checkpoint holds"));
    }
    if (!quantized.problems.empty()) {
      const auto& [tensor, why] = *quantized.problems.begin();
      // Refused before anything is read (exit 2): nothing would fill the value.
      return RefusedModelError(absl::StrCat(
          "--dequantize: ", quantized.problems.size(),
          quantized.problems.size() == 1 ? " stored tensor" : " stored tensors",
          " cannot be dequantized, first ", tensor, ": ", why, "; `metactl check --dequantize` names each"));
    }
    // A skeleton derived from the headers names codes and scales: the module a dequantizing
    // load fills holds the values.
    if (source.derived_from_headers) source.skeleton = DequantizedSkeleton(source.skeleton, quantized, held);
  }

  PlanRequest request;
  request.dequantize = args.Has("dequantize") ? &quantized : nullptr;
  request.skeleton = &source.skeleton;
  request.checkpoint = source.checkpoint.has_value() ? &*source.checkpoint : nullptr;
  request.cluster = &cluster;
  request.world_size = static_cast<int>(gpus);
  request.options = options;
  ML_ASSIGN_OR_RETURN(Plan plan, MakePlan(request));

  if (format == "json") return WriteOutput(args.GetOr("output", "-"), PlanToJson(plan));
  if (format == "hf-device-map") {
    ML_ASSIGN_OR_RETURN(std::vector<HfDeviceMapEntry> device_map, HfDeviceMap(plan, source.skeleton));
    return WriteOutput(args.GetOr("output", "-"), HfDeviceMapToJson(device_map));
  }
  // The header says what the table alone cannot: the cluster planned for, each GPU's budget,
  // and where items' bytes come from (without a checkpoint, ranks would not know which files
  // to read).
  std::string text = absl::StrCat(
      "cluster: ", ClusterSummary(cluster), "; budget ", FormatBytes(plan.ranks.front().budget_bytes),
      " per GPU (--reserve ", ReserveToString(options), "); checkpoint: ",
      source.checkpoint.has_value()
          ? absl::StrCat(source.checkpoint->dir, " (", source.checkpoint->files.size(),
                         source.checkpoint->files.size() == 1 ? " file)" : " files)")
          : "none (items name no files; pass --checkpoint DIR)",
      "\n",
      readable ? QuantizationLine(*declared->quantization, quantized, held, args.Has("dequantize")) : "",
      PlanToTable(plan));
  return WriteOutput(args.GetOr("output", "-"), text);
}

}  // namespace

int RunPlan(int argc, char** argv) {
  CliArgs args("metactl plan", "MODEL --gpus N [flags]",
               "Plans offline (no daemon) which GPU of which node loads which tensors of a model, and which\n"
               "bytes of which checkpoint file hold them. MODEL is a skeleton file (model.json, see\n"
               "`metactl skeleton`), a Hugging Face config.json (its skeleton is built from it), or a\n"
               "checkpoint folder (its skeleton as `metactl skeleton` gives it: from the folder's\n"
               "config.json when supported, else derived; and it is also the checkpoint).\n"
               "The same inputs always give byte-identical JSON.\n"
               "Each GPU's budget is --gpu-memory minus --reserve. Refuses (exit 2) when the model does not\n"
               "fit, naming the rank or unit that overflows and by how much, and what would fit (more GPUs,\n"
               "a higher --tp, another --dtype), and when a skeleton tensor is missing from the checkpoint\n"
               "(it would stay on meta).");
  args.Flag("gpus", "N", "number of GPUs, one rank each (required)");
  args.Flag("nodes", "M", "spread the GPUs over M nodes of N/M each (default: nodes of 8 GPUs)");
  args.Flag("gpu-memory", "SIZE", "memory of each GPU, e.g. 80GiB, 24GB, 40G (default 80GiB)");
  AddStrategyFlags(&args);
  args.Switch("dequantize",
              "plan a quantized checkpoint (its config.json's quantization_config) as a\n"
              "dequantizing load fills it (`metactl load --dequantize`): each value held in\n"
              "--dtype (default BF16) and counted in it, read as its codes and scales. A folder\n"
              "without a supported config.json is planned as the module of its values. Without\n"
              "it, codes are planned as stored, never converted");
  args.Flag("checkpoint", "DIR",
            "with a skeleton file or config.json: the checkpoint whose files and offsets the plan names");
  args.Flag("format", "FORMAT",
            "table (default): a header and one row per rank (node, gpu,\n"
            "bytes, % of budget, what it holds, units); json: the plan, see\n"
            "below; hf-device-map: with --strategy layers on one node, a\n"
            "module -> GPU index object for transformers' device_map=");
  args.Flag("output", "FILE", "write the plan to FILE instead of stdout", 'o');
  args.Flag("daemon", "ADDR",
            "instead of planning offline, show the plan a coordinator gives the ranks of registered\n"
            "model MODEL (--gpus: the world size; default every GPU of the joined nodes)");
  AddCredentialFlags(args);
  args.Epilog(
      "--format json prints {\"model\",\"strategy\",\"world_size\",\"group_size\",\"replicas\",\n"
      "\"ranks\":[{\"rank\",\"node\",\"gpu\",\"bytes\",\"budget\",\"units\",\"items\":[{\"tensor\",\"dtype\","
      "\"shape\",\n"
      "\"bytes\",\"file\",\"offsets\":[begin,end],\"slice\":{\"dim\",\"start\",\"length\"},\"to_dtype\","
      "\"init\",\n"
      "\"missing\"}]}]}: group_size and replicas only when not 1 (tp, fsdp, replicate); file and\n"
      "offsets (always the whole stored tensor's bytes) only with a checkpoint; slice only for part\n"
      "of a tensor; to_dtype only when --dtype converts it; bytes in the held dtype; dequantize\n"
      "{\"rule\",\"codes\",\"scales\"} only with --dequantize, for a value computed from codes and\n"
      "scales (then no file of its own, dtype the held type). A stable\n"
      "contract: docs/cli.md.\n\n"
      "examples:\n"
      "  metactl plan /models/llama-70b --gpus 16 --nodes 2\n"
      "  metactl plan llama-70b.json --checkpoint /models/llama-70b --gpus 8 --gpu-memory 40GiB \\\n"
      "      --format json -o plan.json\n"
      "  metactl plan /models/llama-70b --gpus 16 --strategy tp --tp 8 --dtype bf16 --reserve 8GiB\n"
      "  metactl plan /models/llama-8b --gpus 2 --format hf-device-map -o device_map.json\n"
      "  metactl plan /models/deepseek-v3 --gpus 64 --strategy fsdp --dequantize   # FP8 as BF16\n"
      "  metactl plan llama-70b --daemon node-a:7070 --gpus 16   # what the ranks will load");
  return ParseAndRun("plan", args, argc, argv, &PlanModel);
}

}  // namespace metaload
