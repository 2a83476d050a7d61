#include "tests/faults/no_checksum.h"

#include <cstdlib>
#include <cstring>

namespace metaload {

bool ChecksumsOffFromEnvironment() {
  const char* value = std::getenv(kNoChecksumEnv);
  return value != nullptr && std::strcmp(value, "1") == 0;
}

}  // namespace metaload
