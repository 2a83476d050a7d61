// metactl register: registers a checkpoint with a daemon that can read it.
#include <grpcpp/grpcpp.h>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/metactl/commands.h"
#include "planner/cli_args.h"
#include "planner/units.h"
#include "proto/convert.h"
#include "proto/metaload.grpc.pb.h"

namespace metaload {

int RunRegister(int argc, char** argv) {
  CliArgs args("metactl register", "NAME --checkpoint DIR [--skeleton model.json] --daemon ADDR",
               "Registers checkpoint DIR under NAME with a metad that can read it (DIR must be under\n"
               "that daemon's roots). The daemon reads the safetensors headers (never the data),\n"
               "takes the skeleton given or derives one from the checkpoint, and refuses the model if\n"
               "any skeleton tensor would stay on meta (missing from the checkpoint, or another\n"
               "shape), naming each. The coordinator then plans it for every rank.");
  args.Flag("checkpoint", "DIR", "checkpoint folder (model.safetensors or an index with shards)");
  args.Flag("skeleton", "FILE", "skeleton JSON (docs/skeleton-format.md); default: derived from DIR");
  args.Flag("daemon", "ADDR", "a metad whose roots hold DIR (default $METAD_ADDRESS, else 127.0.0.1:7070)");
  args.Flag("init-missing", "POLICY",
            "error (default): refuse if a tensor would stay on meta; zeros | normal:STD: accept tensors\n"
            "the checkpoint lacks, to be initialized explicitly by `metactl load --init-missing`");
  args.Flag("timeout", "SECONDS", "default 60");
  args.Epilog(
      "example:\n  metactl register llama-8b --checkpoint /models/llama-8b --daemon node-a:7070\n\n"
      "exit codes: 0 registered; 2 bad input; 3 refused: some tensor would stay on meta;\n"
      "1 daemon unreachable or other failure.");
  if (std::optional<int> exit_code = ParseArgsOrExitCode("register", args, argc, argv)) return *exit_code;
  if (absl::Status s = args.ExpectPositionals(1, 1, "one model NAME"); !s.ok())
    return ReportAndExitCode("register", s);
  if (!args.Has("checkpoint")) {
    return ReportAndExitCode("register", absl::InvalidArgumentError("--checkpoint DIR is required"));
  }
  auto timeout_s = args.GetInt("timeout", 60, 1, 86400);
  if (!timeout_s.ok()) return ReportAndExitCode("register", timeout_s.status());

  v1::RegisterModelRequest request;
  request.set_name(args.positionals()[0]);
  // The daemon resolves the path on its host; send it absolute (relative to where we are).
  std::string dir = *args.Get("checkpoint");
  char resolved[PATH_MAX];
  if (::realpath(dir.c_str(), resolved) != nullptr) dir = resolved;
  request.set_checkpoint_dir(dir);
  request.set_init_missing(args.GetOr("init-missing", "error"));
  if (args.Has("skeleton")) {
    std::ifstream in(*args.Get("skeleton"));
    if (!in) {
      return ReportAndExitCode(
          "register", absl::NotFoundError(absl::StrCat("cannot read skeleton ", *args.Get("skeleton"))));
    }
    std::stringstream text;
    text << in.rdbuf();
    request.set_skeleton_json(text.str());
  }
  std::string address = DaemonAddress(args);
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxSendMessageSize(64 << 20);
  auto stub = v1::Metad::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), channel_args));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(*timeout_s)));
  v1::RegisterModelResponse response;
  absl::Status status =
      FromGrpcStatus(stub->RegisterModel(&ctx, request, &response), absl::StrCat("daemon ", address));
  if (!status.ok()) return ReportAndExitCode("register", status);
  std::cout << "registered " << response.name() << ": " << response.tensor_count() << " tensors, "
            << FormatBytes(response.total_bytes()) << ", on node " << response.registered_on()
            << " (coordinator " << response.coordinator() << ")\n";
  return kExitOk;
}

}  // namespace metaload
