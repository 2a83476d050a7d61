// The small vocabulary of PyTorch modules the architecture builders (architectures/*.cc, the
// `build` of each record in architecture_registry.h) are written in. Internal to planner/.
//
// A builder appends tensors in module-definition order, which is the order of transformers'
// `named_parameters()` / `state_dict()`: a module's own parameters, then its own buffers, then
// its submodules in the order its __init__ assigns them. Names and shapes are those of the
// checkpoint format transformers reads and `save_pretrained` writes.
#ifndef METALOAD_PLANNER_SKELETON_HF_HF_ARCH_H_
#define METALOAD_PLANNER_SKELETON_HF_HF_ARCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/format/dtype.h"
#include "planner/skeleton/hf/hf_config_reader.h"
#include "planner/skeleton/hf/hf_rope.h"
#include "planner/skeleton/skeleton.h"

namespace metaload {

// A skeleton beyond this many tensors is refused before it is built: a config saying 10^7
// layers must fail fast, not exhaust memory. The largest real models have ~10^5.
inline constexpr int64_t kMaxHfTensors = 4'000'000;
inline constexpr int64_t kMaxHfLayers = 65'536;

// Appends to a skeleton; parameters take the model's dtype.
class SkeletonBuilder {
 public:
  // REQUIRES: `skeleton` outlives the builder.
  SkeletonBuilder(Skeleton* skeleton, DType param_dtype) : skeleton_(skeleton), param_dtype_(param_dtype) {}

  DType param_dtype() const { return param_dtype_; }

  void Param(std::string name, std::vector<int64_t> shape);
  // torch.nn.Linear(in, out): weight [out, in], then bias [out].
  void Linear(absl::string_view module, int64_t in, int64_t out, bool bias);
  // transformers' Conv1D(nf=out, nx=in), GPT-2's: the transpose, weight [in, out], bias [out].
  void Conv1D(absl::string_view module, int64_t in, int64_t out);
  // torch.nn.LayerNorm (bias) or an RMSNorm (no bias): weight [dim].
  void Norm(absl::string_view module, int64_t dim, bool bias);
  // A non-persistent buffer: in the skeleton, in no checkpoint, computed by `init`.
  void Buffer(std::string name, std::vector<int64_t> shape, DType dtype, std::string init);
  // transformers' rotary embedding modules: inv_freq and its pristine copy original_inv_freq,
  // both float32 whatever the model's dtype.
  void RotaryBuffers(absl::string_view module, const RopeBuffer& rope);
  // A decoder layer: a no-split module of HF class `type`.
  void Layer(std::string path, absl::string_view type);
  // lm_head.weight [vocab, hidden]: its own parameter, or when `tied` an alias of `embedding`
  // (a tied group, no tensor: a checkpoint stores it once).
  void LmHead(bool tied, absl::string_view embedding, int64_t vocab, int64_t hidden);

 private:
  Skeleton* skeleton_;
  DType param_dtype_;
};

// `layers` × `tensors_per_layer` (+ a few) must stay under kMaxHfTensors.
absl::Status CheckTensorCount(const HfConfigReader& config, int64_t layers, int64_t tensors_per_layer);

// `numerator` / `denominator` when it divides evenly; InvalidArgument naming both keys otherwise.
absl::StatusOr<int64_t> DivideEvenly(const HfConfigReader& config, int64_t numerator,
                                     absl::string_view numerator_key, int64_t denominator,
                                     absl::string_view denominator_key);

}  // namespace metaload

#endif  // METALOAD_PLANNER_SKELETON_HF_HF_ARCH_H_
