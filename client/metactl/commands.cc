// What every metactl subcommand shares (commands.h): exit codes from statuses, the daemon
// address, the credential flags and their parsing. Linked into both executables: metactl, and
// metactl-load, the one that loads LibTorch (load_main.cc).
#include "client/metactl/commands.h"

#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

#include "security/client_credentials.h"
#include "util/error_kind.h"

namespace metaload {

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
