// ParseNodeConfig (metad's node.yaml, through yaml-cpp) on arbitrary text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "daemon/config/node_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)metaload::ParseNodeConfig(text, "node.yaml");
  return 0;
}
