#include "daemon/registration/meta_tensor_store.h"

#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "libtorch/torch_glue.h"
#include "util/status_macros.h"

namespace metaload {

struct MetaTensorStore::Impl {
  struct Model {
    std::vector<at::Tensor> tensors;
    MetaModelSummary summary;  // computed once: GetStatus reads it on a reaction thread
  };
  mutable absl::Mutex mu;
  std::map<std::string, std::shared_ptr<const Model>> models ABSL_GUARDED_BY(mu);
};

MetaTensorStore::MetaTensorStore() : impl_(std::make_unique<Impl>()) {}
MetaTensorStore::~MetaTensorStore() = default;

absl::Status MetaTensorStore::Put(const std::string& model, const Skeleton& skeleton) {
  auto built = std::make_shared<Impl::Model>();
  built->tensors.reserve(skeleton.tensors.size());
  for (const SkeletonTensor& t : skeleton.tensors) {
    ML_ASSIGN_OR_RETURN(c10::ScalarType type, ToScalarType(t.dtype));
    ML_RETURN_IF_ERROR(CallTorch(absl::StrCat("meta tensor ", t.name), [&] {
      built->tensors.push_back(
          torch::empty(t.shape, torch::TensorOptions().device(torch::kMeta).dtype(type)));
    }));
  }
  for (const at::Tensor& t : built->tensors) {
    ++built->summary.tensor_count;
    if (t.is_meta()) ++built->summary.meta_tensor_count;
    built->summary.nominal_bytes += t.nbytes();
  }
  absl::MutexLock lock(&impl_->mu);
  impl_->models[model] = std::move(built);
  return absl::OkStatus();
}

absl::Status MetaTensorStore::PutJson(const std::string& model, const std::string& skeleton_json) {
  ML_ASSIGN_OR_RETURN(Skeleton skeleton, ParseSkeletonJson(skeleton_json, model));
  return Put(model, skeleton);
}

void MetaTensorStore::Remove(const std::string& model) {
  absl::MutexLock lock(&impl_->mu);
  impl_->models.erase(model);
}

bool MetaTensorStore::Summarize(const std::string& model, MetaModelSummary* out) const {
  absl::MutexLock lock(&impl_->mu);
  auto it = impl_->models.find(model);
  if (it == impl_->models.end()) return false;
  *out = it->second->summary;
  return true;
}

}  // namespace metaload
