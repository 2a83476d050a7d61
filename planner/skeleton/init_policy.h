// What a rank does with a tensor the checkpoint lacks (`--init-missing`):
//   error      (default) leave it unfilled: verification fails naming it
//   zeros      fill with zeros
//   normal:STD fill from N(0, STD²), seeded by the tensor's name so that every rank and every
//              run that initializes the same tensor gets the same values
#ifndef METALOAD_PLANNER_SKELETON_INIT_POLICY_H_
#define METALOAD_PLANNER_SKELETON_INIT_POLICY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace metaload {

struct InitPolicy {
  enum class Kind { kError, kZeros, kNormal };
  Kind kind = Kind::kError;
  double std = 0;  // kNormal only; > 0 and finite

  bool initializes() const { return kind != Kind::kError; }
  std::string ToString() const;  // the form ParseInitPolicy reads
};

// InvalidArgument naming the text and the accepted forms.
absl::StatusOr<InitPolicy> ParseInitPolicy(absl::string_view text);

// A stable 64-bit seed for `tensor_name` (FNV-1a), used by kNormal.
uint64_t InitSeedFor(absl::string_view tensor_name);

}  // namespace metaload

#endif  // METALOAD_PLANNER_SKELETON_INIT_POLICY_H_
