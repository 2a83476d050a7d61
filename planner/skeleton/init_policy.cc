#include "planner/skeleton/init_policy.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "util/identifiers.h"

namespace metaload {

std::string InitPolicy::ToString() const {
  switch (kind) {
    case Kind::kError:
      return "error";
    case Kind::kZeros:
      return "zeros";
    case Kind::kNormal:
      return absl::StrCat("normal:", std);
  }
  return "error";
}

absl::StatusOr<InitPolicy> ParseInitPolicy(absl::string_view text) {
  InitPolicy policy;
  if (text == "error" || text.empty()) return policy;
  if (text == "zeros") {
    policy.kind = InitPolicy::Kind::kZeros;
    return policy;
  }
  if (absl::StartsWith(text, "normal:")) {
    double std = 0;
    if (absl::SimpleAtod(text.substr(7), &std) && std::isfinite(std) && std > 0) {
      policy.kind = InitPolicy::Kind::kNormal;
      policy.std = std;
      return policy;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("--init-missing ", QuoteForMessage(text),
                                                 ": use error, zeros or normal:STD (e.g. normal:0.02)"));
}

uint64_t InitSeedFor(absl::string_view tensor_name) {
  uint64_t hash = 1469598103934665603ull;
  for (char c : tensor_name) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace metaload
