#include "proto/convert.h"

#include "absl/strings/str_cat.h"
#include "planner/status_macros.h"
#include "planner/units.h"

namespace metaload {
namespace {

void ItemToProto(const ReadItem& item, v1::ReadItem* out) {
  out->set_tensor(item.tensor);
  out->set_dtype(std::string(DTypeCode(item.dtype)));
  for (int64_t d : item.shape) out->add_shape(d);
  out->set_size_bytes(item.size_bytes);
  out->set_file(item.file);
  out->set_begin_offset(item.begin_offset);
  out->set_end_offset(item.end_offset);
  out->set_init(item.init);
  out->set_missing(item.missing);
}

absl::StatusOr<ReadItem> ItemFromProto(const v1::ReadItem& proto) {
  ReadItem item;
  item.tensor = proto.tensor();
  ML_ASSIGN_OR_RETURN(item.dtype, DTypeFromCode(proto.dtype()));
  item.shape.assign(proto.shape().begin(), proto.shape().end());
  item.size_bytes = proto.size_bytes();
  item.file = proto.file();
  item.begin_offset = proto.begin_offset();
  item.end_offset = proto.end_offset();
  item.init = proto.init();
  item.missing = proto.missing();
  uint64_t elements = 1;
  for (int64_t d : item.shape) {
    if (d < 0 || MulOverflows(elements, static_cast<uint64_t>(d), &elements)) {
      return absl::InvalidArgumentError(absl::StrCat("plan item ", item.tensor, ": bad shape"));
    }
  }
  uint64_t expected = 0;
  if (MulOverflows(elements, static_cast<uint64_t>(DTypeSizeBytes(item.dtype)), &expected) ||
      expected != item.size_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("plan item ", item.tensor, ": size_bytes ", item.size_bytes,
                                                   " does not match its shape and dtype"));
  }
  if (!item.file.empty() && (item.end_offset < item.begin_offset ||
                             item.end_offset - item.begin_offset != item.size_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("plan item ", item.tensor, ": offsets [", item.begin_offset,
                                                   ", ", item.end_offset, ") do not hold ", item.size_bytes,
                                                   " bytes"));
  }
  return item;
}

}  // namespace

void PlanToProto(const Plan& plan, v1::Plan* out) {
  out->set_model(plan.model);
  out->set_strategy(plan.strategy);
  out->set_world_size(plan.world_size);
  for (const RankPlan& rank : plan.ranks) {
    v1::RankPlan* r = out->add_ranks();
    r->set_rank(rank.rank);
    r->set_node(rank.node);
    r->set_gpu(rank.gpu);
    r->set_size_bytes(rank.size_bytes);
    r->set_budget_bytes(rank.budget_bytes);
    for (const std::string& unit : rank.units) r->add_units(unit);
    for (const ReadItem& item : rank.items) ItemToProto(item, r->add_items());
  }
}

absl::StatusOr<Plan> PlanFromProto(const v1::Plan& proto) {
  Plan plan;
  plan.model = proto.model();
  plan.strategy = proto.strategy();
  plan.world_size = proto.world_size();
  for (const v1::RankPlan& r : proto.ranks()) {
    RankPlan rank;
    rank.rank = r.rank();
    rank.node = r.node();
    rank.gpu = r.gpu();
    rank.size_bytes = r.size_bytes();
    rank.budget_bytes = r.budget_bytes();
    rank.units.assign(r.units().begin(), r.units().end());
    for (const v1::ReadItem& i : r.items()) {
      ML_ASSIGN_OR_RETURN(ReadItem item, ItemFromProto(i));
      rank.items.push_back(std::move(item));
    }
    plan.ranks.push_back(std::move(rank));
  }
  return plan;
}

void LayoutToProto(const TensorLayout& layout, v1::TensorLocation* out) {
  out->set_name(layout.name);
  out->set_dtype(std::string(DTypeCode(layout.dtype)));
  for (int64_t d : layout.shape) out->add_shape(d);
  out->set_file(layout.file);
  out->set_begin_offset(layout.begin_offset);
  out->set_end_offset(layout.end_offset);
}

absl::StatusOr<TensorLayout> LayoutFromProto(const v1::TensorLocation& proto) {
  TensorLayout layout;
  layout.name = proto.name();
  ML_ASSIGN_OR_RETURN(layout.dtype, DTypeFromCode(proto.dtype()));
  layout.shape.assign(proto.shape().begin(), proto.shape().end());
  layout.file = proto.file();
  layout.begin_offset = proto.begin_offset();
  layout.end_offset = proto.end_offset();
  if (layout.end_offset < layout.begin_offset) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", layout.name, ": end offset before begin"));
  }
  return layout;
}

absl::StatusOr<Checkpoint> CheckpointFromRecord(const v1::ModelRecord& record) {
  Checkpoint checkpoint;
  checkpoint.dir = record.checkpoint_dir();
  for (const v1::TensorLocation& t : record.tensors()) {
    ML_ASSIGN_OR_RETURN(TensorLayout layout, LayoutFromProto(t));
    if (checkpoint.files.empty() || checkpoint.files.back() != layout.file) checkpoint.files.push_back(layout.file);
    checkpoint.tensors.push_back(std::move(layout));
  }
  std::sort(checkpoint.files.begin(), checkpoint.files.end());
  checkpoint.files.erase(std::unique(checkpoint.files.begin(), checkpoint.files.end()), checkpoint.files.end());
  checkpoint.BuildIndex();
  return checkpoint;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view context) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(context, ": ", status.error_message()));
}

}  // namespace metaload
