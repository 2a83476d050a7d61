// `metactl inspect PATH [--format table|json]`: what a checkpoint holds, read from the
// safetensors headers only (never the weights), so it takes milliseconds on a 400 GB model.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/metactl/commands.h"
#include "client/metactl/offline_common.h"
#include "nlohmann/json.hpp"
#include "planner/format/checkpoint.h"
#include "planner/format/tensor_layout.h"
#include "util/cli_args.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

// The stable contract of docs/cli.md: {"tensors":[{"name","dtype","shape","file","offsets"}]},
// one tensor per line so that scripts can also grep it, in the checkpoint's (file, offset) order.
std::string InspectJson(const Checkpoint& checkpoint) {
  std::string out = "{\"tensors\":[";
  for (size_t i = 0; i < checkpoint.tensors.size(); ++i) {
    const TensorLayout& t = checkpoint.tensors[i];
    nlohmann::ordered_json entry;
    entry["name"] = t.name;
    entry["dtype"] = std::string(DTypeCode(t.dtype));
    entry["shape"] = t.shape;
    entry["file"] = t.file;
    entry["offsets"] = {t.begin_offset, t.end_offset};
    // Names were validated as UTF-8 by the reader; `replace` only guards against a future reader.
    absl::StrAppend(&out, i == 0 ? "\n  " : ",\n  ",
                    entry.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  }
  absl::StrAppend(&out, checkpoint.tensors.empty() ? "" : "\n", "]}\n");
  return out;
}

std::string InspectTable(const Checkpoint& checkpoint) {
  std::vector<std::vector<std::string>> rows = {{"name", "dtype", "shape", "bytes", "file"}};
  for (const TensorLayout& t : checkpoint.tensors) {
    rows.push_back({t.name, std::string(DTypeCode(t.dtype)), ShapeToString(t.shape),
                    FormatBytes(t.size_bytes()), t.file});
  }
  std::vector<size_t> widths(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      if (c + 1 == row.size()) {
        absl::StrAppend(&out, row[c], "\n");
      } else if (c == 3) {  // bytes: right-aligned so that magnitudes line up
        absl::StrAppend(&out, std::string(widths[c] - row[c].size(), ' '), row[c], "  ");
      } else {
        absl::StrAppend(&out, row[c], std::string(widths[c] - row[c].size() + 2, ' '));
      }
    }
  }
  absl::StrAppend(&out, checkpoint.tensors.size(),
                  checkpoint.tensors.size() == 1 ? " tensor, " : " tensors, ",
                  FormatBytes(checkpoint.total_size_bytes()), " in ", checkpoint.files.size(),
                  checkpoint.files.size() == 1 ? " file" : " files", " (", checkpoint.dir, ")\n");
  return out;
}

absl::Status Inspect(const CliArgs& args) {
  ML_RETURN_IF_ERROR(args.ExpectPositionals(1, 1, "one PATH (a .safetensors file or a checkpoint folder)"));
  const std::string format = args.GetOr("format", "table");
  ML_RETURN_IF_ERROR(CheckChoice("--format", format, {"table", "json"}));
  ML_RETURN_IF_ERROR(CheckNotAModelName("inspect", args.positionals().front()));
  ML_ASSIGN_OR_RETURN(Checkpoint checkpoint, OpenCheckpoint(args.positionals().front()));
  return WriteOutput("-", format == "json" ? InspectJson(checkpoint) : InspectTable(checkpoint));
}

}  // namespace

int RunInspect(int argc, char** argv) {
  CliArgs args("metactl inspect", "PATH [--format table|json]",
               "Lists every tensor of a checkpoint: name, dtype, shape, size and the file and byte range\n"
               "that hold it. Reads only the safetensors headers, never the weights.\n"
               "PATH is a .safetensors file, a model.safetensors.index.json, or a folder holding\n"
               "model.safetensors or model.safetensors.index.json with its shards.");
  args.Flag("format", "FORMAT", "table (default): aligned columns and a total line; json: see below");
  args.Epilog(
      "--format json prints {\"tensors\":[{\"name\",\"dtype\",\"shape\",\"file\",\"offsets\":[begin,end]}]}, "
      "one\n"
      "tensor a line: dtype as a safetensors code (F32, BF16, ...), file relative to the checkpoint folder,\n"
      "offsets absolute in the file. A stable contract: docs/cli.md.\n"
      "Tensors are listed in checkpoint order: by file name, then by offset in the file.\n\n"
      "examples:\n"
      "  metactl inspect /models/llama-8b\n"
      "  metactl inspect model-00001-of-00004.safetensors --format json | jq '.tensors[].name'");
  return ParseAndRun("inspect", args, argc, argv, &Inspect);
}

}  // namespace metaload
