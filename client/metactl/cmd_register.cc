// metactl register: registers a checkpoint with a daemon that can read it.
#include <grpcpp/grpcpp.h>

#include <climits>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/metactl/commands.h"
#include "client/metactl/offline_common.h"
#include "client/read/busy_retry.h"
#include "planner/skeleton/skeleton.h"
#include "proto/convert.h"
#include "proto/metaload.grpc.pb.h"
#include "proto/upload.h"
#include "security/client_credentials.h"
#include "util/cli_args.h"
#include "util/error_kind.h"
#include "util/fs/location.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

// NAME and --checkpoint DIR, each said plainly when forgotten: a checkpoint passed as a second
// positional, or no --checkpoint at all.
absl::Status CheckRegisterArguments(const CliArgs& args) {
  const std::vector<std::string>& positionals = args.positionals();
  if (args.Has("refresh")) {
    ML_RETURN_IF_ERROR(args.ExpectPositionals(1, 1, "one model NAME"));
    for (const char* flag :
         {"checkpoint", "skeleton", "init-missing", "no-strict", "no-digest", "digest-kind"}) {
      if (args.Has(flag)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--refresh keeps the checkpoint, skeleton, policy, strictness and digests ", positionals[0],
            " was registered with: drop --", flag, " (or register it anew with --replace)"));
      }
    }
    return absl::OkStatus();
  }
  if (positionals.size() == 2 && !args.Has("checkpoint")) {
    return absl::InvalidArgumentError(
        absl::StrCat("the checkpoint is passed with --checkpoint: metactl register ", positionals[0],
                     " --checkpoint ", positionals[1]));
  }
  ML_RETURN_IF_ERROR(args.ExpectPositionals(1, 1, "one model NAME"));
  if (!args.Has("checkpoint")) {
    return absl::InvalidArgumentError(
        absl::StrCat("pass --checkpoint DIR, the checkpoint folder to register as ", positionals[0],
                     " (a folder under the daemon's roots)"));
  }
  return absl::OkStatus();
}

// The skeleton to send for --skeleton PATH: a skeleton file as it is (validated here, so that a
// typo is caught before the daemon is asked), or a Hugging Face config.json turned into its
// skeleton, as `plan` and `check` do; named `name` when it comes from a config.
absl::StatusOr<std::string> SkeletonJsonToSend(const std::string& path, const std::string& name) {
  if (Storage().KindOrMissing(path) != PathKind::kFile) {
    return absl::NotFoundError(
        absl::StrCat("--skeleton ", path,
                     ": not a file (a skeleton file or a config.json; a checkpoint folder is --checkpoint)"));
  }
  ML_ASSIGN_OR_RETURN(ModelSource source,
                      ReadModelSource("register", path, name, /*accept_skeleton_file=*/true));
  return SkeletonToJson(source.skeleton);
}

// For --refresh: the request that registers `name` again exactly as it is registered (its
// checkpoint folder, skeleton and init policy, from GetLayout), replacing the record, so that
// the daemon reads the headers and stats the files anew.
absl::Status FillRefreshRequest(v1::Metad::Stub& stub, grpc::Channel& channel, const std::string& address,
                                absl::Duration timeout, v1::RegisterModelRequest* request) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::GetLayoutRequest layout_request;
  layout_request.set_model(request->name());
  v1::GetLayoutResponse layout;
  ML_RETURN_IF_ERROR(
      FromDaemonCallStatus(stub.GetLayout(&ctx, layout_request, &layout), channel, address,
                           absl::StrCat("looking up ", request->name(), " on daemon ", address)));
  if (layout.checkpoint_dir().empty()) {
    // The fix is in the request: name the checkpoint.
    return WithErrorKind(absl::FailedPreconditionError(
                             absl::StrCat("the coordinator does not say which checkpoint ", request->name(),
                                          " was registered from (it is older than this metactl): "
                                          "register it again with --checkpoint DIR --replace")),
                         ErrorKind::kBadInput);
  }
  request->set_checkpoint_dir(layout.checkpoint_dir());
  request->set_skeleton_json(layout.skeleton_json());
  request->set_init_missing(layout.init_missing());
  request->set_allow_unexpected(layout.allow_unexpected());
  request->set_replace(true);
  // A model keeps its choice: with digests (of their kind), computed anew over the files as they
  // are, or without.
  request->set_digest(false);
  for (const v1::TensorLocation& t : layout.tensors()) {
    if (!t.has_digest()) continue;
    request->set_digest(true);
    request->set_digest_kind(t.digest().kind());
  }
  return absl::OkStatus();
}

}  // namespace

int RunRegister(int argc, char** argv) {
  CliArgs args("metactl register",
               "NAME --checkpoint DIR [--skeleton model.json] [--no-digest | --digest-kind strong] --daemon "
               "ADDR | NAME --refresh",
               "Registers checkpoint DIR under NAME with a metad that can read it (DIR must be under\n"
               "that daemon's roots). The daemon reads the safetensors headers (never the data), takes\n"
               "the skeleton given, else builds it from DIR/config.json (tied weights, rotary buffers)\n"
               "or derives it from the headers, and refuses the model if any skeleton tensor would\n"
               "stay on meta (missing from the checkpoint, or another shape), naming each, or if the\n"
               "checkpoint holds tensors the skeleton has no place for (a larger model, another\n"
               "architecture, quantization state; --no-strict accepts them, not loaded). The\n"
               "coordinator then plans it for every rank.");
  args.Flag("checkpoint", "DIR", "checkpoint folder (model.safetensors or an index with shards)");
  args.Flag("skeleton", "FILE",
            "a skeleton file (docs/skeleton-format.md) or a Hugging Face config.json (turned into its\n"
            "skeleton here, as `metactl plan` does); default: DIR's own: from DIR/config.json when it is\n"
            "of a supported architecture, else derived from the safetensors headers");
  args.Flag("daemon", "ADDR", "a metad whose roots hold DIR (default $METAD_ADDRESS, else 127.0.0.1:7070)");
  args.Flag("init-missing", "POLICY",
            "error (default): refuse if a tensor would stay on meta; zeros | normal:STD: accept tensors\n"
            "the checkpoint lacks, to be initialized explicitly by `metactl load --init-missing`: at most\n"
            "a tenth of the skeleton's (one policy for whatever is missing is for a few new tensors)");
  args.Switch("no-strict",
              "accept checkpoint tensors the skeleton has no place for: they are not loaded, and listed\n"
              "here (default: refused, naming them and the likely cause; rotary inv_freq and buffers\n"
              "older versions persisted are always ignored). --refresh keeps it");
  args.Switch("replace",
              "register NAME even if it is registered from another checkpoint (or with another skeleton\n"
              "or policy): ranks asking afterwards get the new one. Without it that is refused; the\n"
              "same registration again is always accepted");
  args.Switch("refresh",
              "register NAME again as it is registered (same checkpoint folder, skeleton and policy):\n"
              "the daemon re-reads the headers and records each file's size and mtime anew. Run it after\n"
              "rewriting checkpoint files in place, when loads say \"changed since it was registered\"");
  args.Switch(
      "no-digest",
      "skip the digests: by default the daemon reads every tensor's bytes once and records its tile\n"
      "digest, so that every rank proves the bytes it loads, whatever part of a tensor it holds, and\n"
      "`load` says \"verified\" (docs/integrity.md). That costs one read of the checkpoint here\n"
      "(minutes for hundreds of GB from disk: the daemon logs its progress); without it loads say\n"
      "what they read without a digest. --refresh keeps a model's choice");
  args.Switch("digest", "record digests (the default; kept for scripts written before it was)");
  args.Flag("digest-kind", "KIND",
            "fast (default): XXH3 tiles, catches corruption at ~10-17 GB/s a core; strong: SHA-256 LtHash\n"
            "tiles (~1 GB/s a core), which no server choosing the bytes it sends can match");
  args.Flag("timeout", "SECONDS", "default 3600 (60 with --no-digest)");
  AddCredentialFlags(args);
  args.Epilog(
      "examples:\n  metactl register llama-8b --checkpoint /models/llama-8b --daemon node-a:7070\n"
      "  metactl register qwen --checkpoint /models/qwen --skeleton /models/qwen/config.json\n"
      "  metactl register llama-8b --checkpoint /models/llama-8b --digest-kind strong\n"
      "  metactl register llama-8b --refresh\n\n"
      "exit codes: 0 registered; 2 bad input: NAME is registered from another checkpoint (the\n"
      "message says from which; --replace), or refused: some tensor would stay on meta, the\n"
      "checkpoint holds tensors the skeleton has no place for (--no-strict), or --init-missing\n"
      "would initialize more than a tenth of the skeleton (3 is for a failed verification);\n"
      "1 daemon unreachable or other failure.");
  if (std::optional<int> exit_code = ParseArgsOrExitCode("register", args, argc, argv)) return *exit_code;
  if (absl::Status s = CheckRegisterArguments(args); !s.ok()) return ReportAndExitCode("register", s);
  auto timeout_s = args.GetInt("timeout", 60, 1, 86400);
  if (!timeout_s.ok()) return ReportAndExitCode("register", timeout_s.status());

  if (args.Has("no-digest") && (args.Has("digest") || args.Has("digest-kind"))) {
    return ReportAndExitCode(
        "register",
        absl::InvalidArgumentError("--no-digest records no digest: drop --digest and --digest-kind"));
  }
  v1::RegisterModelRequest request;
  request.set_name(args.positionals()[0]);
  request.set_digest(!args.Has("no-digest"));
  if (args.Has("digest-kind")) {
    absl::StatusOr<DigestKind> kind = ParseDigestKind(*args.Get("digest-kind"));
    if (!kind.ok()) return ReportAndExitCode("register", kind.status());
    request.set_digest_kind(DigestKindName(*kind));
  }
  const bool refresh = args.Has("refresh");
  if (!refresh) {
    // The daemon resolves the location on its host (symbolic links included), through the
    // storage back end of its scheme; a relative path is sent absolute, from where we are.
    request.set_checkpoint_dir(NormalLocation(*args.Get("checkpoint")));
    request.set_init_missing(args.GetOr("init-missing", "error"));
    request.set_replace(args.Has("replace"));
    request.set_allow_unexpected(args.Has("no-strict"));
  }
  if (args.Has("skeleton")) {
    absl::StatusOr<std::string> skeleton_json = SkeletonJsonToSend(*args.Get("skeleton"), request.name());
    if (!skeleton_json.ok()) return ReportAndExitCode("register", skeleton_json.status());
    request.set_skeleton_json(*std::move(skeleton_json));
  }
  std::string address = DaemonAddress(args);
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxSendMessageSize(64 << 20);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> dialed = DialDaemon(address, channel_args);
  if (!dialed.ok()) return ReportAndExitCode("register", dialed.status());
  std::shared_ptr<grpc::Channel> channel = *std::move(dialed);
  auto stub = v1::Metad::NewStub(channel);
  if (refresh) {
    absl::Status filled = FillRefreshRequest(*stub, *channel, address, absl::Seconds(*timeout_s), &request);
    if (!filled.ok()) return ReportAndExitCode("register", filled);
  }
  // Digests read the whole checkpoint (a 140 GB model at ~1-2 GB/s from disk: minutes); the
  // daemon stops reading when this deadline passes.
  const int64_t register_timeout_s = args.Has("timeout") || !request.digest() ? *timeout_s : 3600;
  if (request.digest() && !args.Has("timeout")) {
    std::cerr << "metactl register: the daemon reads every tensor's bytes once to record their digests (skip "
                 "with --no-digest)\n";
  }
  v1::RegisterModelResponse response;
  // A full registration queue or upload budget answers "try again": the same registration is
  // accepted again, so it is retried until the deadline.
  absl::Status status =
      RetryWhileBusy(absl::Now() + absl::Seconds(register_timeout_s), [&](absl::Time deadline) {
        grpc::ClientContext ctx;
        ctx.set_deadline(absl::ToChronoTime(deadline));
        return FromDaemonCallStatus(RegisterModel(*stub, &ctx, request, &response), *channel, address,
                                    absl::StrCat("daemon ", address));
      });
  if (!status.ok()) return ReportAndExitCode("register", status);
  std::cout << (refresh ? "refreshed " : "registered ") << response.name() << ": " << response.tensor_count()
            << " tensors, " << FormatBytes(response.total_bytes()) << ", on node " << response.registered_on()
            << " (coordinator " << response.coordinator() << ")"
            << (request.digest() ? "; digests of every tensor recorded" : "") << "\n";
  if (response.not_loaded_size() > 0) {
    // Said at every registration, so that --no-strict never hides what a rank will not load.
    constexpr int kShown = 8;
    std::cout << response.not_loaded_size() << " checkpoint tensor"
              << (response.not_loaded_size() == 1 ? "" : "s")
              << " not loaded (--no-strict; `metactl check` explains):";
    for (int i = 0; i < response.not_loaded_size() && i < kShown; ++i)
      std::cout << " " << response.not_loaded(i);
    if (response.not_loaded_size() > kShown)
      std::cout << " and " << response.not_loaded_size() - kShown << " more";
    std::cout << "\n";
  }
  return kExitOk;
}

}  // namespace metaload
