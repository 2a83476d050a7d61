#include "client/resolve/missing_init.h"

#include <ATen/CPUGeneratorImpl.h>

#include "absl/strings/str_cat.h"
#include "libtorch/torch_glue.h"

namespace metaload {

std::string MissingTensorReason(const std::string& fix) {
  return absl::StrCat("it is not in the checkpoint; initialize it explicitly with ", fix,
                      ", or load a checkpoint that has it");
}

absl::Status InitializeMissing(const InitPolicy& policy, const std::string& name,
                               const std::vector<int64_t>& full_shape, const std::optional<TensorBox>& box,
                               at::Tensor& dest) {
  if (!policy.initializes())
    return absl::InvalidArgumentError("init_missing is \"error\": nothing to initialize");
  return CallTorch(absl::StrCat("initializing ", name), [&] {
    if (policy.kind == InitPolicy::Kind::kZeros) {
      dest.zero_();
      return;
    }
    at::Tensor values = torch::empty(full_shape, torch::TensorOptions().dtype(torch::kFloat));
    auto generator = at::make_generator<at::CPUGeneratorImpl>(InitSeedFor(name));
    values.normal_(0.0, policy.std, generator);
    if (box.has_value()) {
      for (size_t d = 0; d < box->start.size(); ++d) values = values.narrow(d, box->start[d], box->length[d]);
    }
    dest.copy_(values);
  });
}

}  // namespace metaload
