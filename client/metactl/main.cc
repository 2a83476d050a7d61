// metactl: plan, inspect, register and load models with metaload. See docs/cli.md.
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "client/metactl/commands.h"
#include "security/client_credentials.h"
#include "util/error_kind.h"
#include "util/log.h"

namespace metaload {
namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

constexpr Command kCommands[] = {
    {"inspect", RunInspect,
     "list the tensors of a .safetensors file or checkpoint folder (name, dtype, shape, bytes)"},
    {"skeleton", RunSkeleton, "write a model skeleton (model.json) from a checkpoint folder"},
    {"plan", RunPlan, "plan a device map offline for N GPUs (no daemon needed)"},
    {"check", RunCheck, "the meta doctor: what would stay on meta when loading a checkpoint, and the fix"},
    {"register", RunRegister, "register a checkpoint with a metad daemon"},
    {"unregister", RunUnregister, "forget a registered model"},
    {"load", RunLoad, "load one rank's shards from a daemon's plan, then verify across ranks"},
    {"status", RunStatus, "show a daemon's node, cluster members and registered models"},
    {"synth", RunSynth, "write a synthetic Llama-shaped checkpoint (for demos and tests)"},
};

void PrintUsage(std::ostream& out) {
  out << "usage: metactl COMMAND [args] [--help]\n\n"
         "metaload loads big PyTorch models across a GPU cluster without leaving a parameter\n"
         "on the meta device. Commands:\n";
  for (const Command& c : kCommands) {
    std::string name = c.name;
    name.resize(12, ' ');
    out << "  " << name << c.summary << "\n";
  }
  out << "\nexit codes: 0 ok, 1 failure, 2 bad input, 3 verification failed (something on meta)\n"
         "`metactl COMMAND --help` explains each command.\n";
}

}  // namespace

int ReportAndExitCode(const char* command, const absl::Status& status) {
  if (status.ok()) return kExitOk;
  std::string prefix = std::string("metactl ") + command + ": ";
  absl::string_view message = status.message();
  if (message.substr(0, prefix.size()) == prefix) message.remove_prefix(prefix.size());
  std::cerr << prefix << message << "\n";
  return ExitCodeOf(KindOf(status));
}
static_assert(ExitCodeOf(ErrorKind::kBadInput) == kExitBadInput &&
              ExitCodeOf(ErrorKind::kFailure) == kExitFailure &&
              ExitCodeOf(ErrorKind::kMetaTensor) == kExitVerifyFailed);

std::string DaemonAddress(const CliArgs& args) {
  const char* env = std::getenv("METAD_ADDRESS");
  return args.GetOr("daemon", env != nullptr && *env != '\0' ? env : "127.0.0.1:7070");
}

void AddCredentialFlags(CliArgs& args) {
  args.Flag(
      "tls-ca", "FILE",
      "CA certificate (PEM) that signed the daemons' certificates: speak TLS (default $METALOAD_TLS_CA)");
  args.Flag(
      "tls-cert", "FILE",
      "client certificate (PEM), for daemons with `tls.client_ca` (mutual TLS; default $METALOAD_TLS_CERT)");
  args.Flag("tls-key", "FILE", "the client certificate's private key (PEM; default $METALOAD_TLS_KEY)");
  args.Flag("token-file", "FILE",
            "file holding the cluster's bearer token, for daemons with `auth_token_file` (default\n"
            "$METALOAD_TOKEN_FILE); the token is sent, never printed");
}

std::optional<int> ParseArgsOrExitCode(const char* command, CliArgs& args, int argc, char** argv) {
  absl::Status parsed = args.Parse(argc, argv, 2);
  if (!parsed.ok()) return ReportAndExitCode(command, parsed);
  if (args.help()) {
    std::cout << args.Help();
    return kExitOk;
  }
  // Without any of the flags, the environment's files are read at the first dial (offline
  // commands never fail over a variable they do not use).
  if (args.Has("tls-ca") || args.Has("tls-cert") || args.Has("tls-key") || args.Has("token-file")) {
    CredentialFiles flags;
    flags.ca = args.GetOr("tls-ca", "");
    flags.cert = args.GetOr("tls-cert", "");
    flags.key = args.GetOr("tls-key", "");
    flags.token = args.GetOr("token-file", "");
    absl::Status loaded =
        SetProcessCredentials(MergeCredentialFiles(flags, CredentialFilesFromEnvironment()));
    if (!loaded.ok()) return ReportAndExitCode(command, loaded);
  }
  return std::nullopt;
}

int ParseAndRun(const char* command, CliArgs& args, int argc, char** argv,
                absl::Status (*run)(const CliArgs&)) {
  if (std::optional<int> exit_code = ParseArgsOrExitCode(command, args, argc, argv)) return *exit_code;
  return ReportAndExitCode(command, run(args));
}

}  // namespace metaload

int main(int argc, char** argv) {
  metaload::SetLogProgramName("metactl");
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    metaload::PrintUsage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? metaload::kExitBadInput : metaload::kExitOk;
  }
  for (const metaload::Command& c : metaload::kCommands) {
    if (std::strcmp(argv[1], c.name) == 0) return c.run(argc, argv);
  }
  std::cerr << "metactl: unknown command \"" << argv[1] << "\"\n\n";
  metaload::PrintUsage(std::cerr);
  return metaload::kExitBadInput;
}
