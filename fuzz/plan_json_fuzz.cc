// PlanFromJson (a plan a user hands back, e.g. `metactl plan --out` edited) on arbitrary text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "planner/plan/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)metaload::PlanFromJson(text);
  return 0;
}
