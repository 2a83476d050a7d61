// metad: the per-node daemon (daemon/metad_main.h, docs/node-config.md). Nothing is armed here:
// the test faults are linked only into metad_faulty (tests/faults/).
#include "daemon/metad_main.h"

int main(int argc, char** argv) { return metaload::MetadMain(argc, argv, metaload::MetadSeams{}); }
