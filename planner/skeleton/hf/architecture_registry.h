// Hugging Face architectures as registered records: everything metaload knows about a family
// of transformers classes is one `Architecture` — the class names and model types a config.json
// says, the builder of its skeleton and the modules tensor parallelism splits. (What
// transformers renames or fuses on load is not here: the Python package asks the installed
// transformers, client/python/metaload/_core/hf_names.py.) The built-in ones are listed in
// planner/skeleton/hf/architectures/architecture_table.h (one line each, each record a
// constant of its own file there); tests add toys with RegisterArchitecture.
//
//   HfClassMatch match = FindHfArchitecture("MixtralForCausalLM");
//   ML_ASSIGN_OR_RETURN(Skeleton s, match.architecture->build(config, match.hf_class->architecture));
//
// Thread-safety: every function here is safe to call from any thread; records are immutable.
#ifndef METALOAD_PLANNER_SKELETON_HF_ARCHITECTURE_REGISTRY_H_
#define METALOAD_PLANNER_SKELETON_HF_ARCHITECTURE_REGISTRY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "planner/skeleton/hf/hf_config_reader.h"
#include "planner/skeleton/skeleton.h"

namespace metaload {

// A class a config.json may name.
struct HfClass {
  absl::string_view architecture;  // architectures[0]: "MixtralForCausalLM"
  absl::string_view model_type;    // for configs without "architectures": "mixtral"
  // The class transformers loads it as, when another (an old name such as RWForCausalLM):
  // the skeleton's architecture. Such names are not listed as supported.
  absl::string_view loads_as = "";
};

// How tensor parallelism splits a module's weight (Megatron's column/row rules).
enum class TpParallel {
  kColumn,  // weight dim 0 (the output features), bias dim 0
  kRow,     // weight dim 1 (the input features), bias replicated
  kVocab,   // weight dim 0 (an embedding's or head's vocabulary), bias replicated
};

// What a split dimension holds: where it may be cut so that every rank holds whole attention
// heads (the skeleton's AttentionGeometry says how many there are).
enum class TpHeads {
  kNone,      // no head structure (MLP, embeddings, a skeleton rule): any even cut
  kQuery,     // the query heads: q_proj (dim 0), o_proj (dim 1), Falcon's self_attention.dense
              // (dim 1), GPT-2's attn.c_proj (dim 0)
  kKeyValue,  // the key/value heads: k_proj, v_proj (dim 0)
  // Falcon's fused query_key_value (dim 0): kv_heads groups, each its heads/kv_heads query
  // heads then one key and one value head (transformers' FalconAttention._split_heads).
  kFalconGroups,
  // Parts laid end to end: [q; k; v] (GPT-2's c_attn, Phi3's qkv_proj), [k; v] (GPT-2's
  // crossattention.c_attn), [gate; up] (Phi3's gate_up_proj). No contiguous cut gives a rank
  // matching pieces of each part.
  kConcatenated,
};

// A module the `tp` strategy splits, by its name: the last component of its path ("q_proj" for
// model.layers.0.self_attn.q_proj). Everything else (norms, routers, buffers) is replicated.
struct ModuleTpRule {
  absl::string_view module;
  TpParallel parallel = TpParallel::kColumn;
  TpHeads heads = TpHeads::kNone;
  absl::string_view parts = "";  // kConcatenated: the parts, for messages ("[q; k; v]")
  // Only inside a module of this name ("self_attention"); "": anywhere. Rules are tried in
  // order: one with an owner goes before the same module's rule without.
  absl::string_view owner = "";
  bool transposed = false;  // a Conv1D (GPT-2): weight [in, out], so column and row swap dims
};

// One family of classes sharing a builder. Fields left empty: none.
struct Architecture {
  // The skeleton transformers builds for `architecture` (the class it loads as), without the
  // root module, name and size checks SkeletonFromHfConfig adds. InvalidArgument naming the
  // config file and key for a malformed config.
  using BuildFn = absl::StatusOr<Skeleton> (*)(const HfConfigReader& config, absl::string_view architecture);

  constexpr Architecture(absl::Span<const HfClass> classes, BuildFn build,
                         absl::Span<const ModuleTpRule> tp_rules)
      : classes(classes), build(build), tp_rules(tp_rules) {}

  absl::Span<const HfClass> classes;  // in the order "supported:" lists them
  BuildFn build = nullptr;            // REQUIRED
  absl::Span<const ModuleTpRule> tp_rules;
};

// The architecture and class a config names.
struct HfClassMatch {
  const Architecture* architecture = nullptr;  // nullptr: no registered class matches
  const HfClass* hf_class = nullptr;
};

// By `architectures[0]`, as transformers' AutoModel uses it.
HfClassMatch FindHfArchitecture(absl::string_view architecture);
// By `model_type`, for configs without "architectures".
HfClassMatch FindHfModelType(absl::string_view model_type);

// The rule for a module named `module` inside a module named `owner` ("" at the top): the
// first match over every architecture, in table order. Built-in rules go by names, not by the
// skeleton's architecture: skeletons derived from checkpoint headers have none.
const ModuleTpRule* FindModuleTpRule(absl::string_view module, absl::string_view owner);

// Adds an architecture after the built-in ones (tests register toys this way: a family of
// the product is a line in architectures/architecture_table.h). AlreadyExists when one of its
// class names or model types is another's; InvalidArgument without classes or a builder.
// REQUIRES: `record` outlives every later use of the registry (a static).
absl::Status RegisterArchitecture(const Architecture& record);

}  // namespace metaload

#endif  // METALOAD_PLANNER_SKELETON_HF_ARCHITECTURE_REGISTRY_H_
