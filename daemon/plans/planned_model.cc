#include "daemon/plans/planned_model.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "daemon/plans/plan_digest.h"
#include "planner/strategy/strategy.h"
#include "util/identifiers.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

bool ServesFile(const NodeSpec& node, const std::string& path) {
  for (const std::string& root : node.roots) {
    if (IsUnderRoot(path, root)) return true;
  }
  return false;
}

}  // namespace

std::vector<PlanFile> PlanFilesOf(const ModelRecord& record, const std::vector<NodeSpec>& members) {
  const Checkpoint& checkpoint = record.checkpoint;
  std::map<std::string, uint64_t> file_end;
  for (const TensorLayout& t : checkpoint.tensors)
    file_end[t.file] = std::max(file_end[t.file], t.end_offset);
  std::map<std::string, FileStamp> stamp_of;  // the last stat of a file listed twice
  for (const RegisteredFile& stat : record.file_stats) stamp_of[stat.file] = stat.stamp;
  std::vector<PlanFile> files;
  for (const std::string& file : checkpoint.files) {
    PlanFile& out = files.emplace_back();
    out.file = file;
    out.path = absl::StrCat(checkpoint.dir, "/", file);
    out.size_bytes = file_end[file];
    if (auto stamp = stamp_of.find(file); stamp != stamp_of.end()) out.registered = stamp->second;
    for (size_t m = 0; m < members.size(); ++m) {
      if (ServesFile(members[m], out.path)) out.servers.push_back(static_cast<int>(m));
    }
  }
  return files;
}

absl::StatusOr<std::shared_ptr<const PlannedModel>> PlanModel(std::shared_ptr<const RegisteredModel> model,
                                                              std::vector<NodeSpec> members, int world_size,
                                                              const StrategyOptions& options) {
  Cluster cluster;
  int64_t slots = 0;
  for (const NodeSpec& node : members) {
    slots += node.gpu_count;
    cluster.nodes.push_back(node);
  }
  if (world_size == 0 && slots > kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat("the ", members.size(), " joined nodes have ", slots,
                                                   " GPU slots, more than a plan of at most ", kMaxWorldSize,
                                                   " ranks; give the world size"));
  }
  if (world_size > slots) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", world_size, " is larger than the ", slots,
                                                   " GPU slots of the ", members.size(),
                                                   " joined nodes (set `gpus:` in each node config)"));
  }
  const ModelRecord& record = model->record;
  PlanRequest request;
  request.skeleton = &model->skeleton;
  request.checkpoint = &record.checkpoint;
  request.cluster = &cluster;
  request.world_size = world_size;
  request.options = options;
  request.allow_missing = !record.init_missing.empty() && record.init_missing != "error";
  auto planned = std::make_shared<PlannedModel>();
  ML_ASSIGN_OR_RETURN(planned->plan, MakeCompactPlan(request));
  planned->digest = PlanDigest(planned->plan, options);
  planned->tables = BuildPlanTables(planned->plan, planned->digest, record, model->skeleton, members,
                                    PlanFilesOf(record, members));
  planned->model = std::move(model);
  planned->options = options;
  planned->members = std::move(members);
  return std::shared_ptr<const PlannedModel>(std::move(planned));
}

}  // namespace metaload
