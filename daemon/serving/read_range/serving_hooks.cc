#include "daemon/serving/read_range/serving_hooks.h"

namespace metaload {

ServingHooks* ServingHooks::None() {
  static ServingHooks* const none = new ServingHooks();  // never destroyed: streams use it until exit
  return none;
}

}  // namespace metaload
