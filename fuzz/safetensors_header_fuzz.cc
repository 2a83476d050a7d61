// ParseSafetensorsHeader on arbitrary bytes: the input is a whole file (the parser reads only
// its header; the file size is the input's size, so data offsets are checked against it).
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "planner/format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)metaload::ParseSafetensorsHeader(bytes, size, "fuzz.safetensors");
  return 0;
}
