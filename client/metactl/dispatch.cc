// metactl's command table and dispatch (commands.h: MetactlMain), shared by metactl and the
// test builds that register another storage back end first (tests/faults/metactl_memory_main.cc).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <system_error>

#include "client/metactl/commands.h"
#include "util/log.h"

namespace metaload {
namespace {

// `metactl load` runs in metactl-load, beside this executable (load_main.cc): only it links
// LibTorch, whose loading and static initializers cost every other command ~0.5 s of a
// process that never touches a tensor. exec keeps the process, its arguments, environment,
// exit code and signals: to its caller it is the same `metactl load`.
int ExecLoad(int argc, char** argv) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string path = (ec ? std::filesystem::path(argv[0]) : self).parent_path() / "metactl-load";
  (void)argc;
  ::execv(path.c_str(), argv);
  const int exec_errno = errno;
  std::cerr << "metactl load: cannot run " << path
            << " (installed beside metactl): " << std::strerror(exec_errno) << "\n";
  return kExitFailure;
}

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
    {"digest", RunDigest,
     "write a checkpoint folder's digests beside it, for loads without a daemon to prove"},
    {"register", RunRegister, "register a checkpoint with a metad daemon (its digests computed there)"},
    {"unregister", RunUnregister, "forget a registered model"},
    {"release", RunRelease, "forget a node name, so that another daemon may join under it (admin)"},
    {"load", ExecLoad, "load one rank's shards from a daemon's plan, then verify across ranks"},
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
  out << "\nexit codes: 0 ok, 1 failure (or busy: try again), 2 bad input, 3 verification failed (something "
         "on meta)\n"
         "`metactl COMMAND --help` explains each command.\n";
}

}  // namespace

int MetactlMain(int argc, char** argv) {
  SetLogProgramName("metactl");
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    PrintUsage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? kExitBadInput : kExitOk;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) == 0) return c.run(argc, argv);
  }
  std::cerr << "metactl: unknown command \"" << argv[1] << "\"\n\n";
  PrintUsage(std::cerr);
  return kExitBadInput;
}

}  // namespace metaload
