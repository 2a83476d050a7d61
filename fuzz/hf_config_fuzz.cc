// SkeletonFromHfConfig (a Hugging Face config.json) on arbitrary text: the parse and every
// architecture's builder, which turns the config's numbers into shapes.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "planner/skeleton/hf/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  (void)metaload::SkeletonFromHfConfig(text, "config.json");
  return 0;
}
