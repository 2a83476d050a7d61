// `metactl skeleton CHECKPOINT_DIR|CONFIG.json [-o model.json]`: a model skeleton from a
// checkpoint (planner/skeleton/hf/checkpoint_skeleton.h: its folder's config.json, else its headers), or
// built from a Hugging Face config.json, for models that come without one.
// The daemon and planner work from skeletons; writing one to a file lets a user add what a
// checkpoint cannot show (tied groups, no-split modules beyond numbered blocks) before
// registering it.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/metactl/commands.h"
#include "client/metactl/offline_common.h"
#include "planner/skeleton/hf/hf_config.h"
#include "planner/skeleton/skeleton.h"
#include "util/cli_args.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

absl::Status WriteSkeleton(const CliArgs& args) {
  ML_RETURN_IF_ERROR(args.ExpectPositionals(1, 1, "one CHECKPOINT_DIR or CONFIG.json"));
  ML_ASSIGN_OR_RETURN(ModelSource source,
                      ReadModelSource("skeleton", args.positionals().front(), args.GetOr("name", ""),
                                      /*accept_skeleton_file=*/false));
  return WriteOutput(args.GetOr("output", "-"), SkeletonToJson(source.skeleton));
}

// "CONFIG.json is a Hugging Face config.json of LlamaForCausalLM, ... or GPT2LMHeadModel: ...",
// naming every supported architecture, in lines of at most 90 characters like the rest.
std::string ConfigSummary() {
  const std::vector<std::string> names = SupportedHfArchitectures();
  std::string text = "CONFIG.json is a Hugging Face config.json of";
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StrAppend(&text, i == 0 ? " " : (i + 1 == names.size() ? " or " : ", "), names[i]);
  }
  absl::StrAppend(&text, ": the skeleton is what transformers builds from it, with tied groups and the ",
                  "non-persistent buffers (rotary inv_freq) and how to compute them.");
  return WrapWords(text, 90);
}

}  // namespace

int RunSkeleton(int argc, char** argv) {
  CliArgs args(
      "metactl skeleton", "CHECKPOINT_DIR|CONFIG.json [-o model.json] [--name NAME]",
      "Writes the skeleton (model.json) of a checkpoint: every tensor's name, shape and dtype,\n"
      "in model order, and each numbered block (model.layers.N, transformer.h.N, ...) as a module\n"
      "that must not be split across GPUs. Reads only the safetensors headers and config.json.\n"
      "CHECKPOINT_DIR is a folder with model.safetensors or model.safetensors.index.json (or one\n"
      ".safetensors file). When the folder has a config.json of an architecture below, the\n"
      "skeleton is built from it (as for CONFIG.json); else it is derived from the headers, where\n"
      "tied weights are invisible: add them to \"tied\" by hand if the model has any. A config.json\n"
      "of another architecture is noted on stderr; a malformed one is an error (exit 2).\n" +
          ConfigSummary() + "\nThe format is docs/skeleton-format.md.");
  args.Flag("output", "FILE", "where to write the skeleton; - or absent: stdout", 'o');
  args.Flag("name", "NAME",
            "the model's name recorded in the skeleton (default: the checkpoint's or config's folder name)");
  args.Epilog(
      "examples:\n"
      "  metactl skeleton /models/llama-8b -o llama-8b.json\n"
      "  metactl skeleton /models/llama-8b/config.json -o llama-8b.json\n"
      "  metactl plan llama-8b.json --gpus 16 --checkpoint /models/llama-8b");
  return ParseAndRun("skeleton", args, argc, argv, &WriteSkeleton);
}

}  // namespace metaload
