#include "daemon/plans/planned_model.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "daemon/plans/plan_digest.h"
#include "daemon/plans/quantized_plan.h"
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

uint64_t StringBytes(const std::string& s) {
  return sizeof(std::string) + (s.capacity() > 15 ? s.capacity() : 0);
}

template <typename T>
uint64_t VectorBytes(const std::vector<T>& v) {
  return sizeof(v) + v.capacity() * sizeof(T);
}

uint64_t StringsBytes(const std::vector<std::string>& strings) {
  uint64_t total = VectorBytes(strings);
  for (const std::string& s : strings) total += StringBytes(s) - sizeof(std::string);
  return total;
}

}  // namespace

uint64_t HeldBytes(const PlannedModel& planned) {
  const CompactPlan& plan = planned.plan;
  uint64_t total = sizeof(PlannedModel) + VectorBytes(plan.items) + VectorBytes(plan.ranks);
  for (const ReadItem& item : plan.items) {
    total += StringBytes(item.tensor) + StringBytes(item.file) + StringBytes(item.init) +
             VectorBytes(item.shape) - 3 * sizeof(std::string) - sizeof(item.shape);
    if (item.dequantize.has_value()) {
      total += StringBytes(item.dequantize->rule) - sizeof(std::string);
      for (const TensorLayout* stored : {&item.dequantize->codes, &item.dequantize->scales}) {
        total += StringBytes(stored->name) + StringBytes(stored->file) + VectorBytes(stored->shape) +
                 (stored->digest.has_value() ? StringBytes(stored->digest->lanes) : 0) -
                 2 * sizeof(std::string) - sizeof(stored->shape);
      }
    }
  }
  for (const CompactRank& rank : plan.ranks) {
    total += StringBytes(rank.node) - sizeof(std::string) + StringsBytes(rank.units) - sizeof(rank.units) +
             VectorBytes(rank.refs) - sizeof(rank.refs);
  }
  for (const NodeSpec& member : planned.members) {
    total += sizeof(NodeSpec) + StringBytes(member.name) + StringBytes(member.address) +
             StringsBytes(member.roots);
  }
  const PlanTables& tables = planned.tables;
  total +=
      StringBytes(tables.init_missing) + StringsBytes(tables.member_names) + StringsBytes(tables.file_bytes) +
      StringsBytes(tables.member_bytes) + StringsBytes(tables.item_bytes) + VectorBytes(tables.item_file) +
      VectorBytes(tables.item_tied_group) + VectorBytes(tables.files) + VectorBytes(tables.file_servers) +
      VectorBytes(tables.item_source_files) + StringBytes(tables.quantization_config_json);
  for (const auto& sources : tables.item_source_files) total += VectorBytes(sources) - sizeof(sources);
  for (const v1::FileSource& file : tables.files) total += file.SpaceUsedLong();
  for (const auto& group : tables.tied_groups) total += StringsBytes(group);
  for (const auto& servers : tables.file_servers) total += VectorBytes(servers) - sizeof(servers);
  // Counted as the plan is cached, before any rank asks for its fan-out (plan_fanout.h).
  return total + FanoutBoundBytes(plan);
}

uint64_t PlanBytesBound(const RegisteredModel& model, const std::vector<NodeSpec>& members, int world_size) {
  // Saturating: the bound is compared with a limit, and past UINT64_MAX it is over any.
  const auto add = [](uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; };
  const auto mul = [](uint64_t a, uint64_t b) {
    uint64_t product = 0;
    return __builtin_mul_overflow(a, b, &product) ? UINT64_MAX : product;
  };
  uint64_t members_bytes = 0;
  size_t longest_name = 0;
  for (const NodeSpec& node : members) {
    uint64_t roots = 0;
    for (const std::string& root : node.roots) roots = add(roots, sizeof(std::string) + root.size());
    members_bytes = add(members_bytes, sizeof(NodeSpec) + 2 * sizeof(std::string) + node.name.size() +
                                           node.address.size() + roots);
    longest_name = std::max(longest_name, node.name.size());
  }
  const uint64_t ranks = ResolvedWorldSize(members, world_size);
  // Each tensor's item and its rows of the answer tables (its bytes as text, file, tied group):
  // its strings twice, and a few hundred bytes of fixed parts.
  constexpr uint64_t kFixedBytesPerItem = sizeof(ReadItem) + 256;
  uint64_t items_bytes = 0;
  for (const SkeletonTensor& tensor : model.skeleton.tensors) {
    items_bytes = add(items_bytes, kFixedBytesPerItem + 2 * (tensor.name.size() + 8 * tensor.shape.size()));
  }
  // Each file's rows (its FileSource message, servers and bytes): a KiB and its name, at most
  // once a tensor.
  uint64_t files_bytes = 0;
  for (const TensorLayout& tensor : model.record.checkpoint.tensors) {
    files_bytes = add(files_bytes, 1024 + tensor.file.size());
  }
  uint64_t units_bytes = 0;
  for (const SkeletonModule& module : model.skeleton.modules) {
    units_bytes = add(units_bytes, sizeof(std::string) + module.path.size());
  }
  // Each rank's references and their most in a fan-out assignment (plan_fanout.h).
  const uint64_t rank_bytes =
      add(add(sizeof(CompactRank) + sizeof(std::string) + longest_name + kFanoutBytesPerRank,
              mul(model.skeleton.tensors.size(), sizeof(ItemRef) + kFanoutBytesPerRef)),
          units_bytes);
  constexpr uint64_t kFixedBytes = 8 << 10;  // the plan's own strings and tables' headers
  uint64_t total = add(sizeof(PlannedModel) + sizeof(FanoutAssignment) + kFixedBytes, items_bytes);
  total = add(total, files_bytes);
  total = add(total, mul(ranks, rank_bytes));
  return add(total, mul(2, members_bytes));
}

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

uint64_t GpuSlots(const std::vector<NodeSpec>& members) {
  uint64_t slots = 0;
  for (const NodeSpec& node : members) {
    if (__builtin_add_overflow(slots, static_cast<uint64_t>(std::max(node.gpu_count, 0)), &slots))
      return UINT64_MAX;
  }
  return slots;
}

uint64_t ResolvedWorldSize(const std::vector<NodeSpec>& members, int world_size) {
  if (world_size > 0) return static_cast<uint64_t>(world_size);
  return std::min<uint64_t>(GpuSlots(members), kMaxWorldSize);
}

absl::StatusOr<std::shared_ptr<const PlannedModel>> PlanModel(std::shared_ptr<const RegisteredModel> model,
                                                              std::vector<NodeSpec> members, int world_size,
                                                              const StrategyOptions& options) {
  Cluster cluster;
  cluster.nodes = members;
  cluster.origin = Cluster::Origin::kNodeConfigs;
  const uint64_t slots = GpuSlots(members);
  if (world_size == 0 && slots > static_cast<uint64_t>(kMaxWorldSize)) {
    return absl::InvalidArgumentError(absl::StrCat("the ", members.size(), " joined nodes have ", slots,
                                                   " GPU slots, more than a plan of at most ", kMaxWorldSize,
                                                   " ranks; give the world size"));
  }
  if (world_size > 0 && static_cast<uint64_t>(world_size) > slots) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", world_size, " is larger than the ", slots,
                                                   " GPU slots of the ", members.size(),
                                                   " joined nodes (set `gpus:` in each node config)"));
  }
  const ModelRecord& record = model->record;
  ML_ASSIGN_OR_RETURN(const QuantizedPlanInputs quantized, QuantizedPlanOf(*model, options));
  PlanRequest request;
  request.skeleton = quantized.skeleton.has_value() ? &*quantized.skeleton : &model->skeleton;
  request.dequantize = quantized.dequantize ? &quantized.set : nullptr;
  request.checkpoint = &record.checkpoint;
  request.cluster = &cluster;
  request.world_size = world_size;
  request.options = options;
  request.allow_missing = !record.init_missing.empty() && record.init_missing != "error";
  auto planned = std::make_shared<PlannedModel>();
  ML_ASSIGN_OR_RETURN(planned->plan, MakeCompactPlan(request));
  planned->digest = PlanDigest(planned->plan, options);
  planned->tables = BuildPlanTables(planned->plan, planned->digest, record, *request.skeleton, members,
                                    PlanFilesOf(record, members));
  planned->tables.quantization_config_json = quantized.quantization_config_json;
  planned->model = std::move(model);
  planned->options = options;
  planned->members = std::move(members);
  return std::shared_ptr<const PlannedModel>(std::move(planned));
}

}  // namespace metaload
