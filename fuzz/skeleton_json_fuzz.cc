// ParseSkeletonJson (metactl register --skeleton, RegisterModel's skeleton) on arbitrary text.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "planner/skeleton/skeleton.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  (void)metaload::ParseSkeletonJson(text, "skeleton.json");
  return 0;
}
