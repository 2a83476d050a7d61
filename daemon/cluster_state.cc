#include "daemon/cluster_state.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "planner/cluster.h"
#include "planner/status_macros.h"
#include "planner/strategy.h"
#include "proto/convert.h"

namespace metaload {
namespace {

bool UnderRoot(const std::string& path, const v1::NodeInfo& node) {
  for (const std::string& root : node.roots()) {
    if (path == root || absl::StartsWith(path, root == "/" ? root : absl::StrCat(root, "/"))) return true;
  }
  return false;
}

}  // namespace

absl::Status ClusterState::Join(const v1::NodeInfo& node) {
  if (node.name().empty()) return absl::InvalidArgumentError("Join: node name is empty");
  absl::MutexLock lock(&mu_);
  auto it = members_.find(node.name());
  if (it != members_.end() && it->second.address() != node.address()) {
    return absl::InvalidArgumentError(absl::StrCat("node name \"", node.name(), "\" is already used by ",
                                                   it->second.address(), "; give ", node.address(),
                                                   " another `node:` in its config"));
  }
  members_[node.name()] = node;
  return absl::OkStatus();
}

std::vector<v1::NodeInfo> ClusterState::Members() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::NodeInfo> out;
  for (const auto& [name, node] : members_) out.push_back(node);
  return out;
}

absl::Status ClusterState::PutModel(const v1::ModelRecord& record) {
  auto model = std::make_shared<Model>();
  model->record = record;
  ML_ASSIGN_OR_RETURN(model->skeleton, ParseSkeletonJson(record.skeleton_json(), record.name()));
  ML_ASSIGN_OR_RETURN(model->checkpoint, CheckpointFromRecord(record));
  absl::MutexLock lock(&mu_);
  models_[record.name()] = std::move(model);
  return absl::OkStatus();
}

std::vector<v1::ModelRecord> ClusterState::Models() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::ModelRecord> out;
  for (const auto& [name, model] : models_) out.push_back(model->record);
  return out;
}

absl::StatusOr<v1::GetPlanResponse> ClusterState::MakePlan(const std::string& model_name, int world_size,
                                                           const StrategyOptions& options) const {
  std::shared_ptr<const Model> model;
  Cluster cluster;
  std::vector<v1::NodeInfo> members;
  {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(model_name);
    if (it == models_.end()) {
      std::string known;
      for (const auto& [name, m] : models_) absl::StrAppend(&known, known.empty() ? "" : ", ", name);
      return absl::NotFoundError(absl::StrCat("no model \"", model_name, "\" is registered (registered: ",
                                              known.empty() ? "none" : known, ")"));
    }
    model = it->second;
    for (const auto& [name, node] : members_) members.push_back(node);
  }
  for (const v1::NodeInfo& node : members) {
    cluster.nodes.push_back(NodeSpec{node.name(), node.address(), node.gpu_count(), node.gpu_memory_bytes(),
                                     {node.roots().begin(), node.roots().end()}});
  }
  if (world_size > cluster.total_gpus()) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", world_size, " is larger than the ",
                                                      cluster.total_gpus(), " GPU slots of the ", members.size(),
                                                      " joined nodes (set `gpus:` in each node config)"));
  }
  PlanRequest request;
  request.skeleton = &model->skeleton;
  request.checkpoint = &model->checkpoint;
  request.cluster = &cluster;
  request.world_size = world_size;
  request.options = options;
  request.allow_missing = !model->record.init_missing().empty() && model->record.init_missing() != "error";
  ML_ASSIGN_OR_RETURN(Plan plan, metaload::MakePlan(request));

  v1::GetPlanResponse response;
  PlanToProto(plan, response.mutable_plan());
  response.set_skeleton_json(model->record.skeleton_json());
  std::map<std::string, uint64_t> file_end;
  for (const TensorLayout& t : model->checkpoint.tensors) {
    file_end[t.file] = std::max(file_end[t.file], t.end_offset);
  }
  for (const std::string& file : model->checkpoint.files) {
    v1::FileSource* source = response.add_files();
    source->set_file(file);
    source->set_path(absl::StrCat(model->record.checkpoint_dir(), "/", file));
    source->set_size_bytes(file_end[file]);
    for (const v1::NodeInfo& node : members) {
      if (!UnderRoot(source->path(), node)) continue;
      v1::Endpoint* server = source->add_servers();
      server->set_node(node.name());
      server->set_address(node.address());
    }
  }
  return response;
}

}  // namespace metaload
