// SkeletonBuilder and the checks every architecture builder shares (planner/skeleton/hf/hf_arch.h).
#include <utility>

#include "absl/strings/str_cat.h"
#include "planner/skeleton/hf/hf_arch.h"

namespace metaload {

void SkeletonBuilder::Param(std::string name, std::vector<int64_t> shape) {
  SkeletonTensor tensor;
  tensor.name = std::move(name);
  tensor.shape = std::move(shape);
  tensor.dtype = param_dtype_;
  skeleton_->tensors.push_back(std::move(tensor));
}

void SkeletonBuilder::Linear(absl::string_view module, int64_t in, int64_t out, bool bias) {
  Param(absl::StrCat(module, ".weight"), {out, in});
  if (bias) Param(absl::StrCat(module, ".bias"), {out});
}

void SkeletonBuilder::Conv1D(absl::string_view module, int64_t in, int64_t out) {
  Param(absl::StrCat(module, ".weight"), {in, out});
  Param(absl::StrCat(module, ".bias"), {out});
}

void SkeletonBuilder::Norm(absl::string_view module, int64_t dim, bool bias) {
  Param(absl::StrCat(module, ".weight"), {dim});
  if (bias) Param(absl::StrCat(module, ".bias"), {dim});
}

void SkeletonBuilder::Buffer(std::string name, std::vector<int64_t> shape, DType dtype, std::string init) {
  SkeletonTensor tensor;
  tensor.name = std::move(name);
  tensor.shape = std::move(shape);
  tensor.dtype = dtype;
  tensor.is_buffer = true;
  tensor.persistent = false;
  tensor.init = std::move(init);
  skeleton_->tensors.push_back(std::move(tensor));
}

void SkeletonBuilder::RotaryBuffers(absl::string_view module, const RopeBuffer& rope) {
  Buffer(absl::StrCat(module, ".inv_freq"), {rope.length}, DType::kF32, rope.init);
  Buffer(absl::StrCat(module, ".original_inv_freq"), {rope.length}, DType::kF32, rope.init);
}

void SkeletonBuilder::Layer(std::string path, absl::string_view type) {
  skeleton_->modules.push_back(SkeletonModule{std::move(path), std::string(type), /*no_split=*/true});
}

void SkeletonBuilder::LmHead(bool tied, absl::string_view embedding, int64_t vocab, int64_t hidden) {
  if (tied) {
    skeleton_->tied_groups.push_back({std::string(embedding), "lm_head.weight"});
  } else {
    Param("lm_head.weight", {vocab, hidden});
  }
}

absl::Status CheckTensorCount(const HfConfigReader& config, int64_t layers, int64_t tensors_per_layer) {
  // Both factors are bounded by the reader (layers <= kMaxHfLayers, dims <= 2^24): no overflow.
  if (layers * tensors_per_layer > kMaxHfTensors) {
    return config.Error(absl::StrCat(layers, " layers of ", tensors_per_layer, " tensors each is more than ",
                                     kMaxHfTensors, " tensors; refusing to build such a skeleton"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> DivideEvenly(const HfConfigReader& config, int64_t numerator,
                                     absl::string_view numerator_key, int64_t denominator,
                                     absl::string_view denominator_key) {
  if (numerator % denominator != 0) {
    return config.Error(absl::StrCat("\"", config.QualifiedKey(numerator_key), "\" (", numerator,
                                     ") is not a multiple of \"", config.QualifiedKey(denominator_key),
                                     "\" (", denominator, ")"));
  }
  return numerator / denominator;
}

}  // namespace metaload
