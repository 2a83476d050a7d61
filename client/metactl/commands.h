// metactl's subcommands. Each takes the whole argv (argv[1] is the subcommand's name) and
// returns the process exit code:
//   0 success; 2 bad input (the message names the file, field or tensor);
//   3 verification failed (some tensor would stay or is still on meta; names it and its rank);
//   1 anything else (daemon unreachable, I/O failure).
// This header is torch-free: subcommands that use tensors live in their own libraries.
#ifndef METALOAD_CLIENT_METACTL_COMMANDS_H_
#define METALOAD_CLIENT_METACTL_COMMANDS_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "util/cli_args.h"

namespace metaload {

// The whole of `metactl`: argv[1] picks the command (dispatch.cc); returns the exit code.
int MetactlMain(int argc, char** argv);

int RunInspect(int argc, char** argv);
int RunSkeleton(int argc, char** argv);
int RunPlan(int argc, char** argv);
int RunCheck(int argc, char** argv);
int RunDigest(int argc, char** argv);
int RunSynth(int argc, char** argv);
int RunRegister(int argc, char** argv);
int RunUnregister(int argc, char** argv);
int RunRelease(int argc, char** argv);
int RunStatus(int argc, char** argv);
int RunLoad(int argc, char** argv);

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitVerifyFailed = 3;

// Maps a status to an exit code by its kind (util/error_kind.h): InvalidArgument, NotFound,
// PermissionDenied, OutOfRange, AlreadyExists, DataLoss (a corrupt input file),
// ResourceExhausted (does not fit), Unimplemented (unsupported input), and what is marked bad
// input (a path that is not a regular file) -> 2; marked a tensor on meta (tensors would stay on
// meta, MetaTensorError) -> 3; anything else, a FailedPrecondition not marked (not the
// coordinator) too -> 1. Prints "metactl <command>: <message>" to stderr unless ok.
// A leading "metactl <command>: " already in the message (CliArgs adds one) is not repeated.
int ReportAndExitCode(const char* command, const absl::Status& status);

// The daemon to talk to: --daemon, else $METAD_ADDRESS, else 127.0.0.1:7070.
std::string DaemonAddress(const CliArgs& args);

// --tls-ca, --tls-cert, --tls-key, --token-file: for commands that dial a daemon. Parsing
// (ParseArgsOrExitCode) then sets the process's credentials (security/client_credentials.h)
// from them, each defaulting to its METALOAD_* variable.
void AddCredentialFlags(CliArgs& args);

// Parses argv[2..] into `args` (made for "metactl <command>"). Returns the exit code to return
// at once (0 after printing --help, 2 after reporting a flag error), or nullopt to go on.
std::optional<int> ParseArgsOrExitCode(const char* command, CliArgs& args, int argc, char** argv);
// The whole of a subcommand whose work is one function of its flags: ParseArgsOrExitCode, then
// `run`, its status turned into the exit code (ReportAndExitCode).
int ParseAndRun(const char* command, CliArgs& args, int argc, char** argv,
                absl::Status (*run)(const CliArgs&));

}  // namespace metaload

#endif  // METALOAD_CLIENT_METACTL_COMMANDS_H_
