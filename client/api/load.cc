// metaload/load.h over client/load/: LoadRank converts the options, runs the library's LoadRank
// and keeps its RankLoad inside the LoadedRank (verification needs all of it).
#include "metaload/load.h"

#include "client/api/convert.h"
#include "client/api/load_access.h"
#include "client/load/rank_loader.h"
#include "planner/format/dtype.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// A plan item's slice (one dimension) as the box of the whole tensor it is.
Box SliceBox(const TensorSlice& slice, const std::vector<int64_t>& full_shape) {
  Box box{std::vector<int64_t>(full_shape.size(), 0), full_shape};
  box.start[slice.dim] = slice.start;
  box.length[slice.dim] = slice.length;
  return box;
}

}  // namespace

LoadedRank LoadedRankAccess::Make(RankLoad load) {
  auto impl = std::make_shared<LoadedRank::Impl>();
  for (const LoadedTensor& t : load.tensors) {
    LoadedRank::Tensor out{t.name, t.tensor, t.full_shape, std::nullopt,
                           ToTensorResult(t.provenance, t.filled, t.error, t.failovers)};
    if (t.slice.has_value()) out.box = SliceBox(*t.slice, t.full_shape);
    impl->tensors.push_back(std::move(out));
  }
  impl->load = std::move(load);
  return LoadedRank(std::move(impl));
}

const RankLoad& LoadedRankAccess::Load(const LoadedRank& loaded) { return loaded.impl_->load; }

absl::StatusOr<LoadedRank> LoadRank(const LoadRankOptions& options) {
  LoadOptions converted{.model = options.model,
                        .daemon = options.daemon,
                        .rank = options.rank,
                        .world_size = options.world_size,
                        .device = options.device,
                        .strategy = {.strategy = options.strategy, .tp = options.tp, .pp = options.pp},
                        .huge_pages = options.huge_pages};
  if (options.dtype.has_value()) {
    ML_ASSIGN_OR_RETURN(converted.strategy.load_dtype, DTypeFromAnyName(*options.dtype));
  }
  ML_ASSIGN_OR_RETURN(converted.read, ToReadSettings(options.read));
  ML_ASSIGN_OR_RETURN(converted.init_missing, ToInitPolicy(options.init_missing));
  ML_ASSIGN_OR_RETURN(RankLoad load, LoadRank(converted));
  return LoadedRankAccess::Make(std::move(load));
}

int LoadedRank::rank() const { return impl_->load.rank; }
int LoadedRank::world_size() const { return impl_->load.world_size; }
const std::string& LoadedRank::node() const { return impl_->load.node; }
const std::string& LoadedRank::answered_by() const { return impl_->load.answered_by; }
const std::string& LoadedRank::device() const { return impl_->load.device; }
const std::string& LoadedRank::plan_digest() const { return impl_->load.plan_digest; }
const std::string& LoadedRank::plan_label() const { return impl_->load.plan_label; }
const std::vector<LoadedRank::Tensor>& LoadedRank::tensors() const { return impl_->tensors; }
const std::vector<std::string>& LoadedRank::failures() const { return impl_->load.failures; }
uint64_t LoadedRank::direct_bytes() const { return impl_->load.direct_bytes; }
uint64_t LoadedRank::streamed_bytes() const { return impl_->load.streamed_bytes; }
double LoadedRank::seconds() const { return impl_->load.seconds; }

}  // namespace metaload
