// metactl: plan, inspect, register and load models with metaload. See docs/cli.md.
#include "client/metactl/commands.h"

int main(int argc, char** argv) { return metaload::MetactlMain(argc, argv); }
