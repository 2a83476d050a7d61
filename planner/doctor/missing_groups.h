// Grouping the tensors a checkpoint lacks into the findings a person reads first. A checkpoint
// of another size of the model lacks hundreds of tensors that are one run of whole layers; a
// checkpoint saved with tied embeddings, read by a skeleton that does not tie them, lacks one
// head whose partner it holds. A list of every name hides both. `metactl check`'s text
// (check_report.h) prints these groups; the client library's messages can print the same, so
// that the two tell one story. Pure; no I/O.
//
//   const MatchReport report = MatchSkeleton(skeleton, checkpoint);
//   for (const std::string& line : MissingLines(GroupMissing(report.missing, skeleton), 10))
//     std::cout << line << "\n";
//   // A 48-layer skeleton against a 36-layer checkpoint saved with tied embeddings:
//   //   layers 36–47 of 48 are missing: the checkpoint has 36 — is it another size of this model?
//   //   lm_head.weight is missing but the checkpoint has model.embed_tokens.weight of the same
//   //     shape: a tying mismatch (...)
//   //   model.layers.3.mlp.up_proj.weight is in the skeleton but not in the checkpoint
//
// A group lists every tensor it covers (`tensors`): the lines summarise, they never lose a name.
#ifndef METALOAD_PLANNER_DOCTOR_MISSING_GROUPS_H_
#define METALOAD_PLANNER_DOCTOR_MISSING_GROUPS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "planner/skeleton/skeleton.h"

namespace metaload {

enum class MissingKind {
  // A run of consecutive numbered blocks ("model.layers.36" … "model.layers.47") every
  // persistent tensor of which is missing, while the checkpoint holds some other block of the
  // same container.
  kLayers,
  // An input or output embedding ("lm_head.weight") that the skeleton does not tie, missing
  // while the checkpoint holds its usual tied partner ("model.embed_tokens.weight") of the same
  // shape: the checkpoint was saved tied, the skeleton unties the pair.
  kTyingMismatch,
  // One missing tensor no group explains.
  kTensor,
};

// "model.layers.12.mlp.up_proj.weight" is block 12 of "model.layers": the first all-digit
// component (at most 9 digits) after the first and before the last. Experts inside a layer
// ("....experts.3.w1.weight") stay the layer's.
struct BlockOf {
  std::string container;
  int64_t index = -1;  // -1: not in a numbered block
};
BlockOf NumberedBlock(absl::string_view name);

struct MissingGroup {
  MissingKind kind = MissingKind::kTensor;
  std::string message;               // one line, no trailing newline
  std::string fix;                   // what to do; "" for kTensor (the caller knows its context)
  std::vector<std::string> tensors;  // every missing tensor the group covers, skeleton order

  // kLayers only.
  std::string container;    // "model.layers", "transformer.h"
  int64_t first_layer = 0;  // the run's block indexes, inclusive
  int64_t last_layer = 0;
  int64_t layer_count = 0;          // blocks of the container in the skeleton
  int64_t present_layer_count = 0;  // blocks the checkpoint holds at least one tensor of

  // kTyingMismatch only: the stored partner, e.g. "model.embed_tokens.weight".
  std::string partner;
};

// Groups `missing`: the skeleton's persistent tensors that the checkpoint lacks, each name once,
// in any order (MatchReport::missing, or the names a load left on meta). `skeleton` is the model
// they belong to: its persistent tensors give each container's layer count, its shapes and
// `tied_groups` decide a tying mismatch (a pair is untied when `tie_word_embeddings` is false).
// `unusable`: tensors the checkpoint holds under their name but cannot supply (another shape):
// never a stored partner, though they count for the layer that holds them.
//
// Returns kLayers runs (container order, then layer order), then tying mismatches, then one
// kTensor per remaining name in the order of `missing`. A container none of whose blocks is
// stored is not grouped (another architecture or naming, not another size). A name the skeleton
// does not have is a kTensor.
std::vector<MissingGroup> GroupMissing(const std::vector<std::string>& missing, const Skeleton& skeleton,
                                       const std::vector<std::string>& unusable = {});

// The groups' messages in order, the kTensor ones ("X is in the skeleton but not in the
// checkpoint") cut after `max_tensor_lines` with a last line "… and N more" (N: the tensors
// left unnamed).
std::vector<std::string> MissingLines(const std::vector<MissingGroup>& groups, size_t max_tensor_lines);

}  // namespace metaload

#endif  // METALOAD_PLANNER_DOCTOR_MISSING_GROUPS_H_
