#include "client/load/rank_loader.h"

#include <algorithm>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/load/device.h"
#include "client/load/host_arena.h"
#include "client/read/daemon_client.h"
#include "client/resolve/resolver.h"
#include "libtorch/torch_glue.h"
#include "planner/plan/slice.h"
#include "util/log.h"
#include "util/proc_memory.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// The shape a rank holds of an item: its slice's.
std::vector<int64_t> HeldShape(const ReadItem& item) {
  std::vector<int64_t> shape = item.shape;
  if (item.slice.has_value()) shape[item.slice->dim] = item.slice->length;
  return shape;
}

// This rank's part of the plan, checked against what it asked for.
absl::StatusOr<Assignment> FetchAssignment(const LoadOptions& options) {
  DaemonClient local(options.daemon);
  ML_ASSIGN_OR_RETURN(Assignment assignment, local.GetPlan(options.model, options.world_size,
                                                           options.strategy, options.rank, absl::Minutes(1)));
  if (assignment.plan.world_size != options.world_size || assignment.plan.ranks.size() != 1 ||
      assignment.plan.ranks.front().rank != options.rank) {
    return absl::InternalError(absl::StrCat("the plan from ", options.daemon, " is not rank ", options.rank,
                                            "'s part of a plan for ", options.world_size, " ranks"));
  }
  const RankPlan& mine = assignment.plan.ranks.front();
  if (mine.node != assignment.answered_by) {
    // Ranks are laid out node by node (node 0's GPUs, then node 1's, ...), as torchrun and
    // Slurm number them; a rank elsewhere still loads correctly, but against another
    // node's memory budget.
    LogWarning(absl::StrCat("rank ", options.rank, " is planned on node ", mine.node, " but its daemon ",
                            options.daemon, " is node ", assignment.answered_by,
                            ": check `gpus:` in the node configs against the ranks per node"));
  }
  return assignment;
}

// The registered policy, unless the rank was told one: then they must agree, or ranks of
// one job could treat the same missing tensor differently.
absl::StatusOr<InitPolicy> EffectiveInitPolicy(const LoadOptions& options, const Assignment& assignment) {
  ML_ASSIGN_OR_RETURN(InitPolicy registered, ParseInitPolicy(assignment.init_missing));
  if (!options.init_missing.has_value() || options.init_missing->ToString() == registered.ToString()) {
    return registered;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--init-missing ", options.init_missing->ToString(), " conflicts with the policy ", options.model,
      " was registered with (", registered.ToString(), "); drop the flag, or register the model again with ",
      "--replace --init-missing ", options.init_missing->ToString()));
}

// The plan's part for this rank as the model the resolver reads from: the stored layout of
// every item with checkpoint data, the rule of every computed buffer, the tied groups it holds.
ModelView PlanView(const LoadOptions& options, const Assignment& assignment) {
  ModelView view;
  view.model = options.model;
  view.answered_by = assignment.answered_by;
  view.files = assignment.files;
  std::set<std::string> planned;
  for (const ReadItem& item : assignment.plan.ranks.front().items) {
    planned.insert(item.tensor);
    if (!item.file.empty()) {
      view.stored[item.tensor] = TensorLayout{item.tensor,       item.dtype,      item.shape,      item.file,
                                              item.begin_offset, item.end_offset, item.stored_xxh3};
    } else if (!item.missing && !item.init.empty()) {
      view.buffer_rules[item.tensor] = item.init;
    }
  }
  for (const std::vector<std::string>& group : assignment.tied_groups) {
    for (size_t a = 1; a < group.size(); ++a) {
      // A name the plan gives its own item is read as that item says, not as an alias.
      if (!planned.count(group[a])) view.tied_to[group[a]] = group.front();
    }
  }
  return view;
}

// Every tensor of the rank allocated directly on its device (CPU tensors from one arena,
// client/load/host_arena.h: faulting fresh pages in, not copying, is what limits reads from
// the page cache).
absl::Status AllocateTensors(const RankPlan& mine, const torch::Device& device, bool huge_pages,
                             RankLoad* load) {
  std::optional<HostArena> arena;
  uint64_t arena_offset = 0;
  if (device.is_cpu()) {
    uint64_t total = 0;
    for (const ReadItem& item : mine.items) total += HostArena::Padded(item.size_bytes);
    ML_ASSIGN_OR_RETURN(arena, HostArena::Create(total, huge_pages));
  }
  for (const ReadItem& item : mine.items) {
    LoadedTensor loaded;
    loaded.name = item.tensor;
    loaded.slice = item.slice;
    loaded.full_shape = item.shape;
    ML_ASSIGN_OR_RETURN(c10::ScalarType type, ToScalarType(LoadDType(item)));
    ML_RETURN_IF_ERROR(CallTorch(absl::StrCat("allocating ", item.tensor, " on ", device.str()), [&] {
      if (arena.has_value()) {
        loaded.tensor = arena->Tensor(arena_offset, HeldShape(item), type);
        arena_offset += HostArena::Padded(item.size_bytes);
      } else {
        loaded.tensor = torch::empty(HeldShape(item), torch::TensorOptions().dtype(type).device(device));
      }
    }));
    load->tensors.push_back(std::move(loaded));
  }
  return absl::OkStatus();
}

// Aliases of tied groups whose stored tensor this rank holds: the same tensor object, so the
// same storage, filled once (the resolver ties them).
void AddTiedAliases(const std::vector<std::vector<std::string>>& groups, RankLoad& load) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < load.tensors.size(); ++i) index[load.tensors[i].name] = i;
  for (const std::vector<std::string>& group : groups) {
    if (group.empty()) continue;
    auto stored = index.find(group.front());
    if (stored == index.end()) continue;
    for (size_t a = 1; a < group.size(); ++a) {
      const LoadedTensor& source = load.tensors[stored->second];
      LoadedTensor alias;
      alias.name = group[a];
      alias.tensor = source.tensor;
      alias.slice = source.slice;
      alias.full_shape = source.full_shape;
      load.tensors.push_back(std::move(alias));
    }
  }
}

// The request each loaded tensor is: its slice as a box of the whole tensor. A plan item
// without checkpoint data that is not missing is a non-persistent buffer.
std::vector<MaterializeRequest> RequestsOf(const RankPlan& mine, const RankLoad& load) {
  std::vector<MaterializeRequest> requests;
  for (size_t i = 0; i < load.tensors.size(); ++i) {
    const LoadedTensor& t = load.tensors[i];
    MaterializeRequest r{t.name, t.full_shape, std::nullopt, false, t.tensor};
    if (t.slice.has_value()) {
      TensorBox box{std::vector<int64_t>(t.full_shape.size(), 0), t.full_shape};
      box.start[t.slice->dim] = t.slice->start;
      box.length[t.slice->dim] = t.slice->length;
      r.box = std::move(box);
    }
    if (i < mine.items.size()) r.is_buffer = mine.items[i].file.empty() && !mine.items[i].missing;
    requests.push_back(std::move(r));
  }
  return requests;
}

// Only `only` of `plan` (the rest left alone, as kModule leaves a request).
std::vector<Resolution> Restricted(const std::vector<Resolution>& plan, const std::vector<size_t>& only) {
  std::vector<Resolution> out(plan.size(), Resolution{Resolution::Kind::kModule});
  for (size_t i : only) out[i] = plan[i];
  return out;
}

// Which of this rank's items are read so far: the exchange waits on it for each piece it sends.
class ReadProgress {
 public:
  explicit ReadProgress(size_t items) : read_(items, false), results_(items) {}

  void Done(size_t i, const FillResult& result) {
    absl::MutexLock lock(&mu_);
    results_[i] = result;
    read_[i] = true;
  }
  // Every item not read yet, as not filled: its receivers read it themselves.
  void FailRest(const std::string& why) {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < read_.size(); ++i) {
      if (read_[i]) continue;
      results_[i].filled = false;
      results_[i].error = why;
      read_[i] = true;
    }
  }
  FillResult Await(size_t i) {
    absl::MutexLock lock(&mu_);
    const auto read = [this, i]() -> bool { return read_[i]; };
    mu_.Await(absl::Condition(&read));
    return results_[i];
  }

 private:
  absl::Mutex mu_;
  std::vector<bool> read_ ABSL_GUARDED_BY(mu_);
  std::vector<FillResult> results_ ABSL_GUARDED_BY(mu_);
};

// The batches this rank reads in: what it sends, in the order it sends it, in parts of a
// sixteenth of those bytes (at least 64 MiB), so that one part is sent while the next is read;
// then everything else it reads itself.
std::vector<std::vector<size_t>> ReadBatches(const RankFanout& fan, const std::vector<at::Tensor>& tensors,
                                             size_t items) {
  const std::vector<size_t> send = SendOrder(fan);
  uint64_t total = 0;
  for (size_t i : send) total += static_cast<uint64_t>(tensors[i].nbytes());
  const uint64_t part_bytes = std::max<uint64_t>(uint64_t{64} << 20, total / 16);
  std::vector<std::vector<size_t>> batches;
  uint64_t in_part = part_bytes;
  for (size_t i : send) {
    if (in_part >= part_bytes) {
      batches.emplace_back();
      in_part = 0;
    }
    batches.back().push_back(i);
    in_part += static_cast<uint64_t>(tensors[i].nbytes());
  }
  std::vector<size_t> rest;  // no piece: neither sent nor received
  for (size_t i = 0; i < items; ++i) {
    if (i >= fan.piece_of_item.size() || fan.piece_of_item[i] < 0) rest.push_back(i);
  }
  if (!rest.empty()) batches.push_back(std::move(rest));
  return batches;
}

// Adds what FillResolved read of `batch` to `into`.
void Merge(FillOutcome& part, const std::vector<size_t>& batch, FillOutcome& into) {
  for (size_t i : batch) into.results[i] = std::move(part.results[i]);
  into.direct_bytes += part.direct_bytes;
  into.streamed_bytes += part.streamed_bytes;
  for (const auto& [node, bytes] : part.streamed_bytes_by_node) into.streamed_bytes_by_node[node] += bytes;
}

// FillResolved with fan-out: the exchange runs on its own thread while this one reads, in
// batches (ReadBatches), each piece sent as soon as its batch is read; then what did not arrive
// is read from storage; tied aliases take their tensor's final outcome.
absl::StatusOr<FillOutcome> FillWithFanout(const RankFanout& fan, const FanoutSettings& settings,
                                           const ModelView& view, std::vector<MaterializeRequest>& requests,
                                           const std::vector<Resolution>& plan, const InitPolicy& init,
                                           const ReadSettings& read, RankLoad& load) {
  std::vector<at::Tensor> tensors;
  for (const MaterializeRequest& r : requests) tensors.push_back(r.dest);
  ReadProgress progress(plan.size());
  std::vector<FillResult> received(plan.size());
  ExchangeOutcome exchanged;
  std::thread exchange([&] {
    exchanged = ExchangePieces(
        fan, settings, tensors, [&progress](size_t i) { return progress.Await(i); }, received);
  });
  FillOutcome outcome;
  outcome.results.resize(plan.size());
  absl::Status status = absl::OkStatus();
  for (const std::vector<size_t>& batch : ReadBatches(fan, tensors, plan.size())) {
    absl::StatusOr<FillOutcome> part = FillResolved(view, requests, Restricted(plan, batch), init, read);
    if (!part.ok()) {
      status = part.status();
      break;
    }
    Merge(*part, batch, outcome);
    for (size_t i : batch) progress.Done(i, outcome.results[i]);
  }
  if (!status.ok()) progress.FailRest(std::string(status.message()));
  exchange.join();
  ML_RETURN_IF_ERROR(status);
  for (size_t i = 0; i < plan.size(); ++i) {
    if (received[i].filled) outcome.results[i] = std::move(received[i]);
  }
  load.fanout_received_bytes = exchanged.received_bytes;
  load.fanout_sent_bytes = exchanged.sent_bytes;
  for (std::string& note : exchanged.notes) load.fanout_notes.push_back(std::move(note));
  if (!exchanged.read_yourself.empty()) {
    ML_ASSIGN_OR_RETURN(FillOutcome rest,
                        FillResolved(view, requests, Restricted(plan, exchanged.read_yourself), init, read));
    Merge(rest, exchanged.read_yourself, outcome);
  }
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].kind != Resolution::Kind::kTied) continue;
    const FillResult& holder = outcome.results[plan[i].same_as];
    outcome.results[i].filled = holder.filled;
    outcome.results[i].error = holder.error;
  }
  return outcome;
}

}  // namespace

std::string PlanLabel(const StrategyOptions& options, int world_size) {
  std::string label = StrategyLabel(options);
  absl::StrAppend(&label, ", ", world_size, " ranks");
  if (options.load_dtype.has_value()) absl::StrAppend(&label, ", to ", DTypeCode(*options.load_dtype));
  return label;
}

absl::StatusOr<RankLoad> LoadRank(const LoadOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is outside world size ", options.world_size));
  }
  ML_ASSIGN_OR_RETURN(torch::Device device, ResolveDevice(options.device, options.rank));
  ML_ASSIGN_OR_RETURN(Assignment assignment, FetchAssignment(options));
  ML_ASSIGN_OR_RETURN(InitPolicy init, EffectiveInitPolicy(options, assignment));
  const RankPlan& mine = assignment.plan.ranks.front();

  const absl::Time start = absl::Now();
  RankLoad load;
  load.rank = options.rank;
  load.world_size = options.world_size;
  load.node = mine.node;
  load.answered_by = assignment.answered_by;
  load.device = device.str();
  load.plan_digest = assignment.plan_digest;
  load.plan_label = PlanLabel(options.strategy, options.world_size);
  load.started = start;
  load.rss_before_bytes = ResidentBytes();
  for (const ReadItem& item : mine.items) {
    if (!item.file.empty() && item.stored_xxh3.has_value()) load.has_digests = true;
  }

  ML_RETURN_IF_ERROR(AllocateTensors(mine, device, options.huge_pages, &load));
  AddTiedAliases(assignment.tied_groups, load);
  const ModelView view = PlanView(options, assignment);
  std::vector<MaterializeRequest> requests = RequestsOf(mine, load);
  const std::vector<Resolution> plan = Resolve(view, requests, init, "--init-missing zeros|normal:STD");
  std::optional<RankFanout> fan;
  if (options.fan_out.has_value()) {
    fan = PlanRankFanout(options.daemon, options.model, options.world_size, options.strategy, assignment,
                         &load.fanout_notes);
  }
  ML_ASSIGN_OR_RETURN(
      FillOutcome outcome,
      fan.has_value() ? FillWithFanout(*fan, *options.fan_out, view, requests, plan, init, options.read, load)
                      : FillResolved(view, requests, plan, init, options.read));
  for (size_t i = 0; i < requests.size(); ++i) {
    LoadedTensor& loaded = load.tensors[i];
    FillResult& result = outcome.results[i];
    // No module computes a plan's buffer that has no rule.
    const size_t decided = plan[i].kind == Resolution::Kind::kTied ? plan[i].same_as : i;
    if (plan[decided].kind == Resolution::Kind::kModule) {
      result.error = "the plan gives no checkpoint data and no rule to compute it";
      if (decided == i) result.provenance = Provenance{};
    }
    loaded.filled = result.filled;
    loaded.provenance = std::move(result.provenance);
    loaded.error = std::move(result.error);
    loaded.failovers = std::move(result.failovers);
    loaded.digest = result.digest;
  }
  load.direct_bytes = outcome.direct_bytes;
  load.streamed_bytes = outcome.streamed_bytes;
  load.streamed_bytes_by_node = std::move(outcome.streamed_bytes_by_node);
  load.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  load.rss_peak_bytes = PeakResidentBytes();
  return load;
}

}  // namespace metaload
