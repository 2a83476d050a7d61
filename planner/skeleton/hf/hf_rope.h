// The init rule of a rotary embedding's `inv_freq` buffer, from a Hugging Face config's RoPE
// keys (internal to planner/). The rule's grammar and formulas: docs/skeleton-format.md,
// "Init rules".
//
//   ML_ASSIGN_OR_RETURN(RopeBuffer rope, RopeInvFreq(config, head_dim, RopeOptions{}));
//   // rope.init == "rope_inv_freq(base=500000,dim=128,scaling=llama3(factor=8,...))"
#ifndef METALOAD_PLANNER_SKELETON_HF_HF_ROPE_H_
#define METALOAD_PLANNER_SKELETON_HF_HF_ROPE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "planner/skeleton/hf/hf_config_reader.h"

namespace metaload {

struct RopeOptions {
  // rope_theta when the config gives none (transformers' `default_theta`: 1e6 for Mixtral).
  double default_theta = 10000.0;
  // Phi3 differs from the others in three ways: its plain RoPE honours partial_rotary_factor,
  // it reads the old "su" and "yarn" types as "longrope", and original_max_position_embeddings
  // defaults to 4096.
  bool phi3 = false;
};

struct RopeBuffer {
  std::string init;    // the rule, e.g. "rope_inv_freq(base=10000,dim=64)"
  int64_t length = 0;  // elements of inv_freq: ceil(rotary dim / 2)
};

// InvalidArgument naming the key for malformed or unsupported RoPE parameters.
absl::StatusOr<RopeBuffer> RopeInvFreq(const HfConfigReader& config, int64_t head_dim,
                                       const RopeOptions& options);

}  // namespace metaload

#endif  // METALOAD_PLANNER_SKELETON_HF_HF_ROPE_H_
