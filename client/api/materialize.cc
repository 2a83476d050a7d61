// metaload/materialize.h over client/resolve/: Model holds a ModelView, Materialize converts
// the requests and runs the library's Materialize.
#include "metaload/materialize.h"

#include <algorithm>

#include "client/api/convert.h"
#include "client/resolve/materialize.h"
#include "client/resolve/model_view.h"
#include "libtorch/torch_glue.h"
#include "util/status_macros.h"

namespace metaload {

struct Model::Impl {
  ModelView view;
  std::vector<StoredTensor> stored;  // view.stored as the public type, in its (name) order
};

struct ModelAccess {
  static absl::StatusOr<Model> Make(ModelView view) {
    auto impl = std::make_shared<Model::Impl>();
    for (const auto& [name, layout] : view.stored) {
      ML_ASSIGN_OR_RETURN(c10::ScalarType type, ToScalarType(layout.dtype));
      impl->stored.push_back(StoredTensor{name, layout.shape, type, layout.file});
    }
    impl->view = std::move(view);
    return Model(std::move(impl));
  }
  static const ModelView& View(const Model& model) { return model.impl_->view; }
};

absl::StatusOr<Model> Model::Open(const OpenModelOptions& source) {
  ML_ASSIGN_OR_RETURN(ModelView view,
                      OpenModel(ModelSpec{source.name, source.daemon, source.checkpoint, source.timeout}));
  return ModelAccess::Make(std::move(view));
}

const std::string& Model::name() const { return impl_->view.model; }
const std::string& Model::origin() const { return impl_->view.origin; }
const std::string& Model::answered_by() const { return impl_->view.answered_by; }
const std::string& Model::init_missing() const { return impl_->view.init_missing; }
const std::vector<StoredTensor>& Model::stored() const { return impl_->stored; }
const std::map<std::string, std::string>& Model::tied_to() const { return impl_->view.tied_to; }
const std::map<std::string, std::string>& Model::buffer_rules() const { return impl_->view.buffer_rules; }

const StoredTensor* Model::Find(const std::string& name) const {
  auto at = std::lower_bound(impl_->stored.begin(), impl_->stored.end(), name,
                             [](const StoredTensor& t, const std::string& n) { return t.name < n; });
  return at != impl_->stored.end() && at->name == name ? &*at : nullptr;
}

absl::StatusOr<MaterializeReport> Materialize(const Model& model, std::vector<TensorRequest>& requests,
                                              const MaterializeOptions& options) {
  MaterializeSettings settings;
  ML_ASSIGN_OR_RETURN(settings.read, ToReadSettings(options.read));
  ML_ASSIGN_OR_RETURN(settings.init_missing, ToInitPolicy(options.init_missing));
  settings.check_only = options.check_only;
  std::vector<MaterializeRequest> converted;
  converted.reserve(requests.size());
  for (const TensorRequest& r : requests) {
    std::optional<TensorBox> box;
    if (r.box.has_value()) box = TensorBox{r.box->start, r.box->length};
    converted.push_back(MaterializeRequest{r.name, r.full_shape, std::move(box), r.is_buffer, r.dest});
  }
  ML_ASSIGN_OR_RETURN(MaterializeOutcome outcome, Materialize(ModelAccess::View(model), converted, settings));
  MaterializeReport report;
  for (const Finding& f : outcome.refused) report.refused.push_back({f.tensor, f.why});
  report.summary = std::move(outcome.summary);
  for (const MaterializeResult& r : outcome.results) {
    report.results.push_back(ToTensorResult(r.provenance, r.filled, r.error, r.failovers));
  }
  report.direct_bytes = outcome.direct_bytes;
  report.streamed_bytes = outcome.streamed_bytes;
  return report;
}

}  // namespace metaload
