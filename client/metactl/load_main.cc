// metactl-load: `metactl load` (cmd_load.cc), the one subcommand that needs LibTorch, as an
// executable of its own; metactl execs it with the same argv (main.cc), so argv[1] is "load".
#include "client/metactl/commands.h"
#include "util/log.h"

int main(int argc, char** argv) {
  metaload::SetLogProgramName("metactl");
  return metaload::RunLoad(argc, argv);
}
