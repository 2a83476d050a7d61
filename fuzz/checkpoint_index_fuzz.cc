// ParseCheckpointIndex (model.safetensors.index.json) on arbitrary text.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "planner/format/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  (void)metaload::ParseCheckpointIndex(text, "model.safetensors.index.json");
  return 0;
}
