// Small hand-built skeletons and checkpoints for planner tests (no files needed).
#ifndef METALOAD_TESTS_PLANNER_MODEL_BUILDERS_H_
#define METALOAD_TESTS_PLANNER_MODEL_BUILDERS_H_

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "planner/format/checkpoint.h"
#include "planner/skeleton/skeleton.h"

namespace metaload::testing {

inline SkeletonTensor MakeTensor(std::string name, std::vector<int64_t> shape, DType dtype = DType::kBF16) {
  SkeletonTensor tensor;
  tensor.name = std::move(name);
  tensor.shape = std::move(shape);
  tensor.dtype = dtype;
  return tensor;
}

// The tensor names of one Llama decoder layer, in module order, with their shapes.
inline std::vector<SkeletonTensor> LlamaLayerTensors(int layer, int64_t hidden, int64_t intermediate) {
  const std::string p = absl::StrCat("model.layers.", layer, ".");
  return {
      MakeTensor(p + "input_layernorm.weight", {hidden}),
      MakeTensor(p + "self_attn.q_proj.weight", {hidden, hidden}),
      MakeTensor(p + "self_attn.k_proj.weight", {hidden, hidden}),
      MakeTensor(p + "self_attn.v_proj.weight", {hidden, hidden}),
      MakeTensor(p + "self_attn.o_proj.weight", {hidden, hidden}),
      MakeTensor(p + "post_attention_layernorm.weight", {hidden}),
      MakeTensor(p + "mlp.gate_proj.weight", {intermediate, hidden}),
      MakeTensor(p + "mlp.up_proj.weight", {intermediate, hidden}),
      MakeTensor(p + "mlp.down_proj.weight", {hidden, intermediate}),
  };
}

// A Llama-shaped skeleton: embeddings, `layers` no-split decoder layers (9 tensors each),
// final norm, lm_head. 1 + 9 * layers + 2 tensors, all BF16. Attention: 4 heads of hidden / 4,
// each its own key/value head.
inline Skeleton LlamaLikeSkeleton(int layers, int64_t hidden = 16, int64_t intermediate = 32,
                                  int64_t vocab = 64) {
  Skeleton skeleton;
  skeleton.model = "llama-test";
  skeleton.architecture = "LlamaForCausalLM";
  skeleton.attention = AttentionGeometry{4, 4, hidden / 4};
  skeleton.tensors.push_back(MakeTensor("model.embed_tokens.weight", {vocab, hidden}));
  for (int layer = 0; layer < layers; ++layer) {
    for (SkeletonTensor& t : LlamaLayerTensors(layer, hidden, intermediate))
      skeleton.tensors.push_back(std::move(t));
    skeleton.modules.push_back(
        SkeletonModule{absl::StrCat("model.layers.", layer), "LlamaDecoderLayer", true});
  }
  skeleton.tensors.push_back(MakeTensor("model.norm.weight", {hidden}));
  skeleton.tensors.push_back(MakeTensor("lm_head.weight", {vocab, hidden}));
  return skeleton;
}

// A one-file checkpoint holding every persistent tensor of `skeleton` with its shape and
// dtype, laid out back to back after a 64-byte stand-in header, in name order (as
// safetensors writers do). Index built.
inline Checkpoint CheckpointFor(const Skeleton& skeleton, const std::string& file = "model.safetensors") {
  Checkpoint checkpoint;
  checkpoint.dir = "/models/test";
  checkpoint.files = {file};
  std::vector<const SkeletonTensor*> sorted;
  for (const SkeletonTensor& t : skeleton.tensors) {
    if (t.persistent) sorted.push_back(&t);
  }
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  uint64_t offset = 64;
  for (const SkeletonTensor* t : sorted) {
    TensorLayout layout;
    layout.name = t->name;
    layout.dtype = t->dtype;
    layout.shape = t->shape;
    layout.file = file;
    layout.begin_offset = offset;
    layout.end_offset = offset + t->size_bytes();
    offset = layout.end_offset;
    checkpoint.tensors.push_back(std::move(layout));
  }
  checkpoint.BuildIndex();
  return checkpoint;
}

}  // namespace metaload::testing

#endif  // METALOAD_TESTS_PLANNER_MODEL_BUILDERS_H_
