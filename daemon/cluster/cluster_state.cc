#include "daemon/cluster/cluster_state.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "daemon/cluster/request_checks.h"
#include "planner/plan/cluster.h"
#include "planner/strategy/strategy.h"
#include "proto/convert.h"
#include "proto/plan_wire.h"
#include "util/hash/sha256.h"
#include "util/identifiers.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {

struct ClusterState::Flight {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::StatusOr<std::shared_ptr<const PlannedModel>> result ABSL_GUARDED_BY(mu);
};

namespace {

bool ServesFile(const v1::NodeInfo& node, const std::string& path) {
  for (const std::string& root : node.roots()) {
    if (IsUnderRoot(path, root)) return true;
  }
  return false;
}

// The same registration again (from any node): same folder, skeleton, policy and layout; and
// `exactly`, the files as they were then and the same digests (or none). Records that differ
// only in file stats or digests are the same registration made anew (a refresh, or one with
// or without --digest): it replaces the old one without --replace.
bool SameRecord(const v1::ModelRecord& a, const v1::ModelRecord& b, bool exactly) {
  const bool with_file_stats = exactly;
  if (a.checkpoint_dir() != b.checkpoint_dir() || a.skeleton_json() != b.skeleton_json() ||
      a.init_missing() != b.init_missing() || a.tensors_size() != b.tensors_size() ||
      (with_file_stats && a.file_stats_size() != b.file_stats_size())) {
    return false;
  }
  for (int i = 0; with_file_stats && i < a.file_stats_size(); ++i) {
    const v1::FileStat& x = a.file_stats(i);
    const v1::FileStat& y = b.file_stats(i);
    if (x.file() != y.file() || x.size_bytes() != y.size_bytes() || x.mtime_ns() != y.mtime_ns())
      return false;
  }
  for (int i = 0; i < a.tensors_size(); ++i) {
    const v1::TensorLocation& x = a.tensors(i);
    const v1::TensorLocation& y = b.tensors(i);
    if (x.name() != y.name() || x.dtype() != y.dtype() || x.file() != y.file() ||
        x.begin_offset() != y.begin_offset() || x.end_offset() != y.end_offset() ||
        !std::equal(x.shape().begin(), x.shape().end(), y.shape().begin(), y.shape().end())) {
      return false;
    }
    if (exactly && (x.has_xxh3() != y.has_xxh3() || x.xxh3() != y.xxh3())) return false;
  }
  return true;
}

// The planner's key: every strategy's options, in the bytes plans have always been digested by.
std::string OptionsKey(const StrategyOptions& o) { return StrategyOptionsKey(o); }

// Everything about the live members that a plan depends on.
std::string MembersKey(const std::vector<v1::NodeInfo>& members) {
  std::string key;
  for (const v1::NodeInfo& m : members) {
    absl::StrAppend(&key, m.name(), "@", m.address(), "#", m.gpu_count(), "x", m.gpu_memory_bytes());
    for (const std::string& root : m.roots()) absl::StrAppend(&key, ":", root);
    key += '\n';
  }
  return key;
}

// Fields fed to the digest are length-prefixed, so that no two different plans feed the same
// bytes ("ab","c" vs "a","bc").
class DigestWriter {
 public:
  void Add(absl::string_view text) {
    Int(text.size());
    sha_.Update(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  }
  void Int(uint64_t value) {
    uint8_t bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(value >> (8 * i));
    sha_.Update(absl::MakeConstSpan(bytes, 8));
  }
  std::string Hex() { return sha_.HexDigest(); }

 private:
  Sha256 sha_;
};

void IndexForResponses(PlannedModel& planned);

}  // namespace

std::vector<v1::FileSource> FileSources(const RegisteredModel& model,
                                        const std::vector<v1::NodeInfo>& members) {
  std::map<std::string, uint64_t> file_end;
  for (const TensorLayout& t : model.checkpoint.tensors)
    file_end[t.file] = std::max(file_end[t.file], t.end_offset);
  std::map<std::string, const v1::FileStat*> stat_of;
  for (const v1::FileStat& stat : model.record.file_stats()) stat_of[stat.file()] = &stat;
  std::vector<v1::FileSource> files;
  for (const std::string& file : model.checkpoint.files) {
    v1::FileSource& source = files.emplace_back();
    source.set_file(file);
    source.set_path(absl::StrCat(model.record.checkpoint_dir(), "/", file));
    source.set_size_bytes(file_end[file]);
    if (auto stat = stat_of.find(file); stat != stat_of.end()) {
      source.set_registered_size_bytes(stat->second->size_bytes());
      source.set_registered_mtime_ns(stat->second->mtime_ns());
    }
    for (const v1::NodeInfo& node : members) {
      if (!ServesFile(node, source.path())) continue;
      v1::Endpoint* server = source.add_servers();
      server->set_node(node.name());
      server->set_address(node.address());
    }
  }
  return files;
}

absl::StatusOr<v1::GetLayoutResponse> ClusterState::LayoutFor(const std::string& model_name) const {
  std::shared_ptr<const RegisteredModel> model;
  std::vector<v1::NodeInfo> members;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::shared_ptr<const RegisteredModel>> found = FindModelLocked(model_name);
    if (!found.ok()) return found.status();
    model = *std::move(found);
    members = LiveMembersLocked(clock_());
  }
  v1::GetLayoutResponse response;
  response.set_model(model_name);
  *response.mutable_tensors() = model->record.tensors();
  // Each file's servers least loaded first (ties by name), the order a rank fails over in.
  const std::vector<uint32_t> loads = LoadsOf(members);
  std::map<std::string, uint32_t> load_of;
  for (size_t m = 0; m < members.size(); ++m) load_of[members[m].name()] = loads[m];
  for (v1::FileSource& file : FileSources(*model, members)) {
    std::stable_sort(
        file.mutable_servers()->begin(), file.mutable_servers()->end(),
        [&](const v1::Endpoint& x, const v1::Endpoint& y) { return load_of[x.node()] < load_of[y.node()]; });
    *response.add_files() = std::move(file);
  }
  response.set_skeleton_json(model->record.skeleton_json());
  response.set_init_missing(model->record.init_missing().empty() ? "error" : model->record.init_missing());
  response.set_checkpoint_dir(model->record.checkpoint_dir());
  return response;
}

std::string PlanDigest(const CompactPlan& plan, const StrategyOptions& options) {
  DigestWriter d;
  d.Add("metaload.plan/1");
  d.Add(OptionsKey(options));
  d.Add(plan.model);
  d.Add(plan.strategy);
  d.Int(static_cast<uint64_t>(plan.world_size));
  d.Int(static_cast<uint64_t>(plan.group_size));
  d.Int(static_cast<uint64_t>(plan.replicas));
  for (const CompactRank& rank : plan.ranks) {
    d.Int(static_cast<uint64_t>(rank.rank));
    d.Add(rank.node);
    d.Int(static_cast<uint64_t>(rank.gpu));
    d.Int(rank.size_bytes);
    d.Int(rank.budget_bytes);
    d.Int(rank.refs.size());
    for (const ItemRef& ref : rank.refs) {
      const ReadItem& item = plan.items[ref.item];
      d.Add(item.tensor);
      d.Int(static_cast<uint64_t>(item.dtype));
      d.Int(item.shape.size());
      for (int64_t dim : item.shape) d.Int(static_cast<uint64_t>(dim));
      d.Int(ref.size_bytes);
      d.Add(item.file);
      d.Int(item.begin_offset);
      d.Int(item.end_offset);
      d.Add(item.init);
      d.Int(item.missing ? 1 : 0);
      d.Int(ref.slice_dim >= 0 ? 1 : 0);
      if (ref.slice_dim >= 0) {
        d.Int(static_cast<uint64_t>(ref.slice_dim));
        d.Int(static_cast<uint64_t>(ref.slice_start));
        d.Int(static_cast<uint64_t>(ref.slice_length));
      }
      d.Int(item.to_dtype.has_value() ? 1 + static_cast<uint64_t>(*item.to_dtype) : 0);
      // Only when present, so that plans without digests keep the digest they always had.
      if (item.stored_xxh3.has_value()) {
        d.Add("xxh3");
        d.Int(*item.stored_xxh3);
      }
    }
  }
  return d.Hex();
}

ClusterState::ClusterState(Options options, std::function<absl::Time()> clock)
    : options_(options), clock_(std::move(clock)) {}

bool ClusterState::Live(const Member& member, absl::Time now) const {
  return member.permanent ||
         (!member.left && !member.dropped && now - member.last_seen <= options_.member_timeout);
}

std::vector<v1::NodeInfo> ClusterState::LiveMembersLocked(absl::Time now) const {
  std::vector<v1::NodeInfo> out;
  for (const auto& [name, member] : members_) {
    if (Live(member, now)) out.push_back(member.info);
  }
  return out;
}

void ClusterState::SetSelf(const v1::NodeInfo& node) {
  absl::MutexLock lock(&mu_);
  Member self{node, clock_()};
  self.permanent = true;
  members_[node.name()] = std::move(self);
}

void ClusterState::SetSelfLoad(std::function<uint32_t()> read_streams) {
  self_load_ = std::move(read_streams);
}

std::vector<uint32_t> ClusterState::LoadsOf(const std::vector<v1::NodeInfo>& members) const {
  std::vector<uint32_t> loads(members.size(), 0);
  absl::MutexLock lock(&mu_);
  for (size_t m = 0; m < members.size(); ++m) {
    auto it = members_.find(members[m].name());
    if (it == members_.end()) continue;
    loads[m] = it->second.permanent && self_load_ ? self_load_() : it->second.read_streams;
  }
  return loads;
}

absl::StatusOr<bool> ClusterState::Join(const v1::NodeInfo& node, uint32_t read_streams,
                                        const std::string& identity) {
  const absl::Time now = clock_();
  absl::MutexLock lock(&mu_);
  auto it = members_.find(node.name());
  if (it != members_.end() && Live(it->second, now) && !it->second.permanent &&
      it->second.identity != identity) {
    return absl::PermissionDeniedError(absl::StrCat("node \"", node.name(), "\" joined as ",
                                                    it->second.identity, "; a Join as ", identity,
                                                    " may not change it (only the member itself may)"));
  }
  if (it != members_.end() && Live(it->second, now) && it->second.info.address() != node.address()) {
    return absl::InvalidArgumentError(absl::StrCat("node name \"", node.name(), "\" is already used by ",
                                                   it->second.info.address(), "; give ", node.address(),
                                                   " another `node:` in its config"));
  }
  if (it != members_.end() && it->second.permanent) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node name \"", node.name(), "\" is the coordinator's own; give the joining node another"));
  }
  const bool is_new = it == members_.end() || !Live(it->second, now);
  if (it == members_.end() && members_.size() >= static_cast<size_t>(kMaxMembers)) {
    // Members that are down are remembered (status shows them) until they make room.
    for (auto m = members_.begin(); m != members_.end();) {
      m = Live(m->second, now) ? std::next(m) : members_.erase(m);
    }
    if (members_.size() >= static_cast<size_t>(kMaxMembers)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the cluster has ", members_.size(), " members, the most one coordinator takes"));
    }
  }
  Member member{node, now};
  member.read_streams = read_streams;
  member.identity = identity;
  members_[node.name()] = std::move(member);
  return is_new;
}

std::vector<v1::NodeInfo> ClusterState::Members() const {
  absl::MutexLock lock(&mu_);
  return LiveMembersLocked(clock_());
}

absl::Status ClusterState::Leave(const v1::NodeInfo& node, const std::string& identity) {
  absl::MutexLock lock(&mu_);
  auto it = members_.find(node.name());
  if (it == members_.end() || it->second.permanent) {
    return absl::NotFoundError(absl::StrCat("node \"", node.name(), "\" is not a member"));
  }
  // Only the daemon that joined under the name may take it out of plans.
  if (it->second.identity != identity) {
    return absl::PermissionDeniedError(absl::StrCat("node \"", node.name(), "\" joined as ",
                                                    it->second.identity, "; ", identity,
                                                    " may not take it out"));
  }
  if (it->second.info.address() != node.address()) {
    return absl::InvalidArgumentError(absl::StrCat("node \"", node.name(), "\" is a member at ",
                                                   it->second.info.address(), ", not at ", node.address()));
  }
  it->second.left = true;
  return absl::OkStatus();
}

std::vector<MemberStatus> ClusterState::MemberStates() const {
  const absl::Time now = clock_();
  absl::MutexLock lock(&mu_);
  std::vector<MemberStatus> out;
  out.reserve(members_.size());
  for (const auto& [name, member] : members_) {
    MemberStatus status{member.info, MemberStatus::kUp,
                        member.permanent ? absl::ZeroDuration() : now - member.last_seen};
    if (!Live(member, now)) status.state = member.left ? MemberStatus::kLeft : MemberStatus::kDown;
    out.push_back(std::move(status));
  }
  return out;
}

void ClusterState::SyncMembers(const std::vector<v1::NodeInfo>& members) {
  const absl::Time now = clock_();
  absl::MutexLock lock(&mu_);
  std::set<std::string> listed;
  for (const v1::NodeInfo& node : members) listed.insert(node.name());
  // A member the registry no longer lists is down at once (its lease expired, or it left),
  // and stays in status as such until its place is needed.
  for (auto& [name, member] : members_) {
    if (!member.permanent && listed.count(name) == 0) member.dropped = true;
  }
  for (const v1::NodeInfo& node : members) {
    auto it = members_.find(node.name());
    if (it != members_.end() && it->second.permanent) continue;  // a permanent name stays as it is
    if (it == members_.end() && members_.size() >= static_cast<size_t>(kMaxMembers)) {
      for (auto m = members_.begin(); m != members_.end();)
        m = Live(m->second, now) ? std::next(m) : members_.erase(m);
      if (members_.size() >= static_cast<size_t>(kMaxMembers)) break;
    }
    members_[node.name()] = Member{node, now};
  }
}

void ClusterState::AttachStore(ModelStore* store) {
  absl::MutexLock registry(&registry_mu_);
  store_ = store;
}

absl::Status ClusterState::PutModel(const v1::ModelRecord& record, bool replace) {
  // Before the skeleton is parsed: parsing is what costs (a 200k-tensor skeleton, ~300 MiB).
  if (record.tensors_size() > options_.max_tensors_per_model) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "model ", record.name(), " has ", record.tensors_size(), " tensors; this daemon registers at most ",
        options_.max_tensors_per_model, " per model (max_tensors_per_model in its node config)"));
  }
  return AddModel(record, replace, /*persist=*/true);
}

absl::Status ClusterState::RestoreModel(const v1::ModelRecord& record) {
  return AddModel(record, /*replace=*/false, /*persist=*/false);
}

absl::Status ClusterState::AddModel(const v1::ModelRecord& record, bool replace, bool persist) {
  auto model = std::make_shared<RegisteredModel>();
  model->record = record;
  ML_ASSIGN_OR_RETURN(model->skeleton, ParseSkeletonJson(record.skeleton_json(), record.name()));
  ML_ASSIGN_OR_RETURN(model->checkpoint, CheckpointFromRecord(record));
  model->served = ServedRanges(record.name(), model->checkpoint);
  absl::MutexLock registry(&registry_mu_);
  {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(record.name());
    if (it != models_.end()) {
      if (persist && SameRecord(it->second->record, record, /*exactly=*/true)) return absl::OkStatus();
      // The same registration with its files stated anew (rewritten in place since, or a record
      // older than file stats) or its digests computed anew, added or dropped replaces the old
      // one without --replace: a refresh.
      if (!replace && !SameRecord(it->second->record, record, /*exactly=*/false)) {
        return absl::AlreadyExistsError(absl::StrCat(
            "model \"", record.name(), "\" is already registered from ", it->second->record.checkpoint_dir(),
            " (on node ", it->second->record.registered_on(), "); pass --replace to register ",
            record.checkpoint_dir(), " under this name, or `metactl unregister ", record.name(), "` first"));
      }
    } else if (const size_t most = persist ? options_.max_models : kMaxModels; models_.size() >= most) {
      return absl::ResourceExhaustedError(absl::StrCat(
          models_.size(), " models are registered, the most this daemon holds (max_models in its ",
          "node config); unregister some"));
    }
  }
  if (persist && store_ != nullptr) {
    if (absl::Status stored = store_->Put(record); !stored.ok()) {
      return absl::Status(stored.code(),
                          absl::StrCat("model ", record.name(), " not registered: persisting it in ",
                                       store_->Describe(), ": ", stored.message()));
    }
  }
  absl::MutexLock lock(&mu_);
  model->version = next_version_++;
  models_[record.name()] = std::move(model);
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyModel(const v1::ModelRecord& record) {
  {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(record.name());
    if (it != models_.end() && SameRecord(it->second->record, record, /*exactly=*/true)) {
      return absl::OkStatus();
    }
  }
  return AddModel(record, /*replace=*/true, /*persist=*/false);
}

bool ClusterState::DropModel(const std::string& name) {
  absl::MutexLock registry(&registry_mu_);
  absl::MutexLock lock(&mu_);
  return models_.erase(name) > 0;
}

absl::Status ClusterState::RemoveModel(const std::string& name) {
  absl::MutexLock registry(&registry_mu_);
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::shared_ptr<const RegisteredModel>> found = FindModelLocked(name);
    if (!found.ok()) return found.status();
  }
  if (store_ != nullptr) {
    if (absl::Status removed = store_->Remove(name); !removed.ok()) {
      return absl::Status(removed.code(), absl::StrCat("model ", name, " not unregistered: removing it from ",
                                                       store_->Describe(), ": ", removed.message()));
    }
  }
  absl::MutexLock lock(&mu_);
  models_.erase(name);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const RegisteredModel>> ClusterState::FindModelLocked(
    const std::string& name) const {
  auto it = models_.find(name);
  if (it != models_.end()) return it->second;
  std::string known;
  for (const auto& [n, m] : models_) absl::StrAppend(&known, known.empty() ? "" : ", ", n);
  return absl::NotFoundError(absl::StrCat("no model ", QuoteForMessage(name), " is registered (registered: ",
                                          known.empty() ? "none" : known, ")"));
}

std::vector<v1::ModelRecord> ClusterState::Models() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::ModelRecord> out;
  for (const auto& [name, model] : models_) out.push_back(model->record);
  return out;
}

absl::StatusOr<std::shared_ptr<const ServedRanges>> ClusterState::ServedRangesOf(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::shared_ptr<const RegisteredModel>> found = FindModelLocked(name);
  if (!found.ok()) return found.status();
  return std::shared_ptr<const ServedRanges>(*found, &(*found)->served);  // shares the model's lifetime
}

absl::StatusOr<std::shared_ptr<const PlannedModel>> ClusterState::PlanFor(const std::string& model_name,
                                                                          int world_size,
                                                                          const StrategyOptions& options) {
  std::shared_ptr<const RegisteredModel> model;
  std::vector<v1::NodeInfo> members;
  std::shared_ptr<Flight> flight;
  bool compute = false;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::shared_ptr<const RegisteredModel>> found = FindModelLocked(model_name);
    if (!found.ok()) return found.status();
    model = *std::move(found);
    members = LiveMembersLocked(clock_());
    const std::string key = absl::StrCat(model_name, "\n", model->version, "\n", OptionsKey(options), "\n",
                                         world_size, "\n", MembersKey(members));
    auto cached =
        std::find_if(plans_.begin(), plans_.end(), [&](const auto& entry) { return entry.first == key; });
    if (cached != plans_.end()) {
      plans_.splice(plans_.begin(), plans_, cached);
      flight = cached->second;
    } else {
      flight = std::make_shared<Flight>();
      compute = true;
      plans_.emplace_front(key, flight);
      while (plans_.size() > static_cast<size_t>(options_.cached_plans)) plans_.pop_back();
    }
  }
  if (compute) {
    auto result = Compute(std::move(model), std::move(members), world_size, options);
    absl::MutexLock lock(&flight->mu);
    flight->result = std::move(result);
    flight->done = true;
  }
  absl::MutexLock lock(&flight->mu);
  flight->mu.Await(absl::Condition(&flight->done));
  return flight->result;
}

absl::StatusOr<std::shared_ptr<const PlannedModel>> ClusterState::Compute(
    std::shared_ptr<const RegisteredModel> model, std::vector<v1::NodeInfo> members, int world_size,
    const StrategyOptions& options) const {
  Cluster cluster;
  int64_t slots = 0;
  for (const v1::NodeInfo& node : members) {
    slots += node.gpu_count();
    cluster.nodes.push_back(NodeSpec{node.name(),
                                     node.address(),
                                     node.gpu_count(),
                                     node.gpu_memory_bytes(),
                                     {node.roots().begin(), node.roots().end()}});
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
  PlanRequest request;
  request.skeleton = &model->skeleton;
  request.checkpoint = &model->checkpoint;
  request.cluster = &cluster;
  request.world_size = world_size;
  request.options = options;
  request.allow_missing = !model->record.init_missing().empty() && model->record.init_missing() != "error";
  auto planned = std::make_shared<PlannedModel>();
  ML_ASSIGN_OR_RETURN(planned->plan, MakeCompactPlan(request));
  planned->digest = PlanDigest(planned->plan, options);
  planned->model = std::move(model);
  planned->options = options;
  planned->members = std::move(members);
  IndexForResponses(*planned);
  return std::shared_ptr<const PlannedModel>(std::move(planned));
}

namespace {

// The per-plan tables ResponseFor reads: each item's proto, file and tied group, and every
// file's servers.
void IndexForResponses(PlannedModel& planned) {
  const RegisteredModel& model = *planned.model;
  const CompactPlan& plan = planned.plan;
  std::map<std::string, int> file_index;
  planned.files = FileSources(model, planned.members);
  for (const v1::FileSource& file : planned.files) {
    file_index[file.file()] = static_cast<int>(planned.file_bytes.size());
    v1::FileSource bare = file;
    bare.clear_servers();
    planned.file_bytes.push_back(bare.SerializeAsString());
    std::vector<int>& servers = planned.file_servers.emplace_back();
    for (const v1::Endpoint& server : file.servers()) {
      for (size_t m = 0; m < planned.members.size(); ++m) {
        if (planned.members[m].name() == server.node()) servers.push_back(static_cast<int>(m));
      }
    }
  }
  for (const v1::NodeInfo& node : planned.members) {
    v1::Endpoint endpoint;
    endpoint.set_node(node.name());
    endpoint.set_address(node.address());
    planned.member_bytes.push_back(endpoint.SerializeAsString());
  }
  std::map<std::string, int> group_of;
  for (size_t g = 0; g < model.skeleton.tied_groups.size(); ++g) {
    if (!model.skeleton.tied_groups[g].empty())
      group_of[model.skeleton.tied_groups[g].front()] = static_cast<int>(g);
  }
  for (const ReadItem& item : plan.items) {
    v1::ReadItem proto;
    ItemToProto(item, &proto);
    planned.item_bytes.push_back(proto.SerializeAsString());
    auto file = file_index.find(item.file);
    planned.item_file.push_back(file == file_index.end() ? -1 : file->second);
    auto group = group_of.find(item.tensor);
    planned.item_tied_group.push_back(group == group_of.end() ? -1 : group->second);
  }
}

}  // namespace

absl::StatusOr<v1::GetPlanResponse> ClusterState::ResponseFor(const PlannedModel& planned,
                                                              std::optional<int> rank) const {
  const CompactPlan& plan = planned.plan;
  const RegisteredModel& model = *planned.model;
  v1::GetPlanResponse response;
  response.set_plan_digest(planned.digest);
  response.set_init_missing(model.record.init_missing().empty() ? "error" : model.record.init_missing());
  if (!rank.has_value()) {
    PlanToProto(plan.Expand(), response.mutable_plan());
    response.set_skeleton_json(model.record.skeleton_json());
    for (const v1::FileSource& source : planned.files) *response.add_files() = source;
    return response;
  }
  ML_ASSIGN_OR_RETURN(std::string bytes, RankResponseBytes(planned, *rank));
  if (!response.ParseFromString(bytes)) return absl::InternalError("a rank's plan did not parse");
  return response;
}

absl::StatusOr<std::string> ClusterState::RankResponseBytes(const PlannedModel& planned, int rank) const {
  const CompactPlan& plan = planned.plan;
  const RegisteredModel& model = *planned.model;
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
  std::vector<bool> file_used(planned.files.size(), false);
  std::vector<bool> group_used(model.skeleton.tied_groups.size(), false);
  size_t rank_bytes = rank_head.size();
  for (size_t i = 0; i < mine.refs.size(); ++i) {
    const ItemRef& ref = mine.refs[i];
    tails[i] = SlicedItemTail(ref.size_bytes, ref.slice_dim, ref.slice_start, ref.slice_length);
    rank_bytes +=
        LengthDelimitedFieldSize(kRankItemsField, planned.item_bytes[ref.item].size() + tails[i].size);
    if (planned.item_file[ref.item] >= 0) file_used[planned.item_file[ref.item]] = true;
    if (planned.item_tied_group[ref.item] >= 0) group_used[planned.item_tied_group[ref.item]] = true;
  }
  const size_t plan_bytes = plan_head.size() + LengthDelimitedFieldSize(kPlanRanksField, rank_bytes);

  v1::GetPlanResponse rest;
  rest.set_plan_digest(planned.digest);
  rest.set_init_missing(model.record.init_missing().empty() ? "error" : model.record.init_missing());
  for (size_t g = 0; g < group_used.size(); ++g) {
    if (!group_used[g]) continue;
    v1::TiedGroup* tied = rest.add_tied_groups();
    for (const std::string& name : model.skeleton.tied_groups[g]) tied->add_names(name);
  }
  std::string out = rest.SerializeAsString();
  out.reserve(out.size() + 64 * planned.files.size() +
              LengthDelimitedFieldSize(kResponsePlanField, plan_bytes) + 256);
  // The files this rank reads, each with its servers, in the order the rank tries them: its own
  // node first, then the others least loaded first, ties rotated by rank so that ranks spread
  // their streams over every server; at most servers_per_file.
  const std::vector<uint32_t> load = LoadsOf(planned.members);
  for (size_t f = 0; f < planned.files.size(); ++f) {
    if (!file_used[f]) continue;
    const std::vector<int>& all = planned.file_servers[f];
    std::vector<int> chosen, others;
    for (size_t i = 0; i < all.size(); ++i) {
      const int m = all[(static_cast<size_t>(rank) + i) % all.size()];
      (planned.members[m].name() == mine.node ? chosen : others).push_back(m);
    }
    std::stable_sort(others.begin(), others.end(), [&](int x, int y) { return load[x] < load[y]; });
    for (int m : others) {
      if (chosen.size() >= static_cast<size_t>(options_.servers_per_file)) break;
      chosen.push_back(m);
    }
    size_t file_size = planned.file_bytes[f].size();
    for (int m : chosen)
      file_size += LengthDelimitedFieldSize(kFileServersField, planned.member_bytes[m].size());
    AppendLengthDelimitedHeader(kResponseFilesField, file_size, &out);
    out += planned.file_bytes[f];
    for (int m : chosen) AppendLengthDelimitedField(kFileServersField, planned.member_bytes[m], &out);
  }
  AppendLengthDelimitedHeader(kResponsePlanField, plan_bytes, &out);
  out += plan_head;
  AppendLengthDelimitedHeader(kPlanRanksField, rank_bytes, &out);
  out += rank_head;
  for (size_t i = 0; i < mine.refs.size(); ++i)
    AppendSlicedItem(planned.item_bytes[mine.refs[i].item], tails[i], &out);
  return out;
}

}  // namespace metaload
