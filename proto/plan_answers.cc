#include "proto/plan_answers.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "proto/convert.h"
#include "proto/plan_wire.h"

namespace metaload {
namespace {

v1::Endpoint EndpointOf(const NodeSpec& node) {
  v1::Endpoint endpoint;
  endpoint.set_node(node.name);
  endpoint.set_address(node.address);
  return endpoint;
}

// `file` as the wire lists it, with `servers` (indexes into `members`) in that order.
v1::FileSource FileSourceOf(const PlanFile& file, const std::vector<NodeSpec>& members,
                            const std::vector<int>& servers) {
  v1::FileSource source;
  source.set_file(file.file);
  source.set_path(file.path);
  source.set_size_bytes(file.size_bytes);
  source.set_registered_size_bytes(file.registered.size_bytes);
  source.set_registered_mtime_ns(file.registered.mtime_ns);
  source.set_registered_version(file.registered.version);
  for (int m : servers) *source.add_servers() = EndpointOf(members[m]);
  return source;
}

}  // namespace

PlanTables BuildPlanTables(const CompactPlan& plan, std::string digest, const ModelRecord& record,
                           const Skeleton& skeleton, const std::vector<NodeSpec>& members,
                           const std::vector<PlanFile>& files) {
  PlanTables tables;
  tables.digest = std::move(digest);
  tables.init_missing = InitMissingOf(record);
  tables.tied_groups = skeleton.tied_groups;
  std::map<std::string, int> file_index;
  for (const PlanFile& file : files) {
    file_index[file.file] = static_cast<int>(tables.file_bytes.size());
    tables.files.push_back(FileSourceOf(file, members, file.servers));
    tables.file_bytes.push_back(FileSourceOf(file, members, {}).SerializeAsString());
    tables.file_servers.push_back(file.servers);
  }
  for (const NodeSpec& node : members) {
    tables.member_names.push_back(node.name);
    tables.member_bytes.push_back(EndpointOf(node).SerializeAsString());
  }
  std::map<std::string, int> group_of;
  for (size_t g = 0; g < tables.tied_groups.size(); ++g) {
    if (!tables.tied_groups[g].empty()) group_of[tables.tied_groups[g].front()] = static_cast<int>(g);
  }
  for (const ReadItem& item : plan.items) {
    v1::ReadItem proto;
    ItemToProto(item, &proto);
    tables.item_bytes.push_back(proto.SerializeAsString());
    auto file = file_index.find(item.file);
    tables.item_file.push_back(file == file_index.end() ? -1 : file->second);
    auto group = group_of.find(item.tensor);
    tables.item_tied_group.push_back(group == group_of.end() ? -1 : group->second);
    std::vector<int>& sources = tables.item_source_files.emplace_back();
    if (item.dequantize.has_value()) {
      for (const TensorLayout* stored : {&item.dequantize->codes, &item.dequantize->scales}) {
        if (auto f = file_index.find(stored->file); f != file_index.end()) sources.push_back(f->second);
      }
    }
  }
  return tables;
}

absl::StatusOr<std::string> RankAnswerBytes(const CompactPlan& plan, const PlanTables& tables, int rank,
                                            const std::vector<uint32_t>& loads, int servers_per_file) {
  if (rank < 0 || rank >= plan.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside the plan's ", plan.world_size, " ranks"));
  }
  const CompactRank& mine = plan.ranks[static_cast<size_t>(rank)];

  // The small parts as messages.
  v1::RankPlan rank_header;
  rank_header.set_rank(mine.rank);
  rank_header.set_node(mine.node);
  rank_header.set_gpu(mine.gpu);
  rank_header.set_size_bytes(mine.size_bytes);
  rank_header.set_budget_bytes(mine.budget_bytes);
  for (const std::string& unit : mine.units) rank_header.add_units(unit);
  const std::string rank_head = rank_header.SerializeAsString();
  v1::Plan plan_header;
  plan_header.set_model(plan.model);
  plan_header.set_strategy(plan.strategy);
  plan_header.set_world_size(plan.world_size);
  plan_header.set_group_size(plan.group_size);
  plan_header.set_replicas(plan.replicas);
  const std::string plan_head = plan_header.SerializeAsString();

  // The items: whole items serialized once per plan, each followed by its slice's tail.
  std::vector<ItemTail> tails(mine.refs.size());
  std::vector<bool> file_used(tables.files.size(), false);
  std::vector<bool> group_used(tables.tied_groups.size(), false);
  size_t rank_bytes = rank_head.size();
  for (size_t i = 0; i < mine.refs.size(); ++i) {
    const ItemRef& ref = mine.refs[i];
    tails[i] = SlicedItemTail(ref.size_bytes, ref.slice_dim, ref.slice_start, ref.slice_length);
    rank_bytes +=
        LengthDelimitedFieldSize(kRankItemsField, tables.item_bytes[ref.item].size() + tails[i].size);
    if (tables.item_file[ref.item] >= 0) file_used[tables.item_file[ref.item]] = true;
    if (tables.item_tied_group[ref.item] >= 0) group_used[tables.item_tied_group[ref.item]] = true;
    for (int f : tables.item_source_files[ref.item]) file_used[f] = true;
  }
  const size_t plan_bytes = plan_head.size() + LengthDelimitedFieldSize(kPlanRanksField, rank_bytes);

  v1::GetPlanResponse rest;
  rest.set_plan_digest(tables.digest);
  rest.set_init_missing(tables.init_missing);
  rest.set_quantization_config_json(tables.quantization_config_json);
  for (size_t g = 0; g < group_used.size(); ++g) {
    if (!group_used[g]) continue;
    v1::TiedGroup* tied = rest.add_tied_groups();
    for (const std::string& name : tables.tied_groups[g]) tied->add_names(name);
  }
  std::string out = rest.SerializeAsString();
  out.reserve(out.size() + 64 * tables.files.size() +
              LengthDelimitedFieldSize(kResponsePlanField, plan_bytes) + 256);
  // The files this rank reads, each with its servers, in the order the rank tries them: its own
  // node first, then the others least loaded first, ties rotated by rank so that ranks spread
  // their streams over every server; at most servers_per_file.
  for (size_t f = 0; f < tables.files.size(); ++f) {
    if (!file_used[f]) continue;
    const std::vector<int>& all = tables.file_servers[f];
    std::vector<int> chosen, others;
    for (size_t i = 0; i < all.size(); ++i) {
      const int m = all[(static_cast<size_t>(rank) + i) % all.size()];
      (tables.member_names[m] == mine.node ? chosen : others).push_back(m);
    }
    std::stable_sort(others.begin(), others.end(), [&](int x, int y) { return loads[x] < loads[y]; });
    for (int m : others) {
      if (chosen.size() >= static_cast<size_t>(servers_per_file)) break;
      chosen.push_back(m);
    }
    size_t file_size = tables.file_bytes[f].size();
    for (int m : chosen)
      file_size += LengthDelimitedFieldSize(kFileServersField, tables.member_bytes[m].size());
    AppendLengthDelimitedHeader(kResponseFilesField, file_size, &out);
    out += tables.file_bytes[f];
    for (int m : chosen) AppendLengthDelimitedField(kFileServersField, tables.member_bytes[m], &out);
  }
  AppendLengthDelimitedHeader(kResponsePlanField, plan_bytes, &out);
  out += plan_head;
  AppendLengthDelimitedHeader(kPlanRanksField, rank_bytes, &out);
  out += rank_head;
  for (size_t i = 0; i < mine.refs.size(); ++i)
    AppendSlicedItem(tables.item_bytes[mine.refs[i].item], tails[i], &out);
  return out;
}

absl::StatusOr<v1::GetPlanResponse> RankAnswer(const CompactPlan& plan, const PlanTables& tables, int rank,
                                               const std::vector<uint32_t>& loads, int servers_per_file) {
  absl::StatusOr<std::string> bytes = RankAnswerBytes(plan, tables, rank, loads, servers_per_file);
  if (!bytes.ok()) return bytes.status();
  v1::GetPlanResponse response;
  if (!response.ParseFromString(*bytes)) return absl::InternalError("a rank's plan did not parse");
  return response;
}

v1::GetPlanResponse WholePlanAnswer(const CompactPlan& plan, const PlanTables& tables,
                                    const std::string& skeleton_json) {
  v1::GetPlanResponse response;
  response.set_plan_digest(tables.digest);
  response.set_init_missing(tables.init_missing);
  PlanToProto(plan.Expand(), response.mutable_plan());
  response.set_skeleton_json(skeleton_json);
  response.set_quantization_config_json(tables.quantization_config_json);
  for (const v1::FileSource& source : tables.files) *response.add_files() = source;
  return response;
}

v1::GetLayoutResponse LayoutAnswer(const ModelRecord& record, const std::vector<PlanFile>& files,
                                   const std::vector<NodeSpec>& members, const std::vector<uint32_t>& loads) {
  v1::GetLayoutResponse response;
  response.set_model(record.name);
  for (const TensorLayout& t : record.checkpoint.tensors) LayoutToProto(t, response.add_tensors());
  // Each file's servers least loaded first (ties in member order: by name), the order a rank
  // fails over in.
  for (const PlanFile& file : files) {
    std::vector<int> servers = file.servers;
    std::stable_sort(servers.begin(), servers.end(), [&](int x, int y) { return loads[x] < loads[y]; });
    *response.add_files() = FileSourceOf(file, members, servers);
  }
  response.set_skeleton_json(record.skeleton_json);
  response.set_init_missing(InitMissingOf(record));
  response.set_checkpoint_dir(record.checkpoint.dir);
  response.set_allow_unexpected(record.allow_unexpected);
  response.set_hf_config_json(record.hf_config_json);
  response.set_registered_on(record.registered_on);
  FileStatsToProto(record.file_stats, response.mutable_file_stats());
  return response;
}

}  // namespace metaload
