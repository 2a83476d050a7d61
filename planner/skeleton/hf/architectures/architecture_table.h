// The built-in architectures: the one table that lists them, one line each, in the order
// "supported:" names their classes. Each line names the record
// (planner/skeleton/hf/architecture_registry.h) that the family's own file in this folder
// defines:
//
//   const Architecture kGpt2Architecture(kGpt2Classes, &BuildGpt2, kGpt2TpRules);  // gpt2.cc
//
// A new architecture is that file and its line here: the build compiles every .cc in this
// folder. (A macro, so that the one line both declares the record and puts it in the table.)
#ifndef METALOAD_PLANNER_SKELETON_HF_ARCHITECTURES_ARCHITECTURE_TABLE_H_
#define METALOAD_PLANNER_SKELETON_HF_ARCHITECTURES_ARCHITECTURE_TABLE_H_

#include "planner/skeleton/hf/architecture_registry.h"

#define METALOAD_BUILT_IN_ARCHITECTURES(X) \
  X(kLlamaFamilyArchitecture)              \
  X(kFalconArchitecture)                   \
  X(kGpt2Architecture)

namespace metaload {

#define METALOAD_DECLARE_ARCHITECTURE(record) extern const Architecture record;
METALOAD_BUILT_IN_ARCHITECTURES(METALOAD_DECLARE_ARCHITECTURE)
#undef METALOAD_DECLARE_ARCHITECTURE

}  // namespace metaload

#endif  // METALOAD_PLANNER_SKELETON_HF_ARCHITECTURES_ARCHITECTURE_TABLE_H_
