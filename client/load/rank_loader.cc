#include "client/load/rank_loader.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/load/device.h"
#include "client/load/fanout_fill.h"
#include "client/load/host_arena.h"
#include "client/read/daemon_client.h"
#include "client/resolve/resolver.h"
#include "libtorch/torch_glue.h"
#include "planner/format/quantization.h"
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
  // With fan-out, the rank's part of it comes with its plan, in the same answer.
  ML_ASSIGN_OR_RETURN(Assignment assignment,
                      local.GetPlan(options.model, options.world_size, options.strategy, options.rank,
                                    absl::Minutes(1), /*fanout=*/options.fan_out.has_value()));
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

// A dequantizing plan's values, paired again from the stored layouts its items carry by the
// planner's own rule (FindQuantized under the plan's quantization_config): the rank computes each
// value by the code the coordinator planned it with, and a plan whose items disagree with that
// pairing (another rule, shape or codes tensor) is refused before anything is read.
absl::Status TakeQuantized(const Assignment& assignment, ModelView& view) {
  std::map<std::string, TensorLayout> sources;
  for (const ReadItem& item : assignment.plan.ranks.front().items) {
    if (!item.dequantize.has_value()) continue;
    for (const TensorLayout* stored : {&item.dequantize->codes, &item.dequantize->scales}) {
      auto [it, added] = sources.emplace(stored->name, *stored);
      if (!added && (it->second.file != stored->file || it->second.begin_offset != stored->begin_offset ||
                     it->second.end_offset != stored->end_offset)) {
        return absl::InvalidArgumentError(
            absl::StrCat("the plan places stored tensor ", stored->name, " at two places"));
      }
    }
  }
  if (sources.empty()) return absl::OkStatus();
  if (!assignment.quantization.has_value()) {
    return absl::InvalidArgumentError(
        "the plan has dequantized items but no quantization_config to pair their codes and scales by");
  }
  std::vector<TensorLayout> stored;
  for (auto& [name, layout] : sources) stored.push_back(std::move(layout));
  view.quantization = assignment.quantization;
  view.quantized = FindQuantized(*view.quantization, stored);
  for (const ReadItem& item : assignment.plan.ranks.front().items) {
    if (!item.dequantize.has_value()) continue;
    auto value = view.quantized.values.find(item.tensor);
    if (value == view.quantized.values.end() || value->second.Rule() != item.dequantize->rule ||
        value->second.shape != item.shape || value->second.codes.name != item.dequantize->codes.name ||
        value->second.scales.name != item.dequantize->scales.name) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan item ", item.tensor, ": its codes and scales (", item.dequantize->rule,
                       ") do not pair as ", view.quantization->Description(), " pairs them",
                       value == view.quantized.values.end() ? std::string()
                                                            : absl::StrCat(" (", value->second.Rule(), ")")));
    }
  }
  return absl::OkStatus();
}

// The plan's part for this rank as the model the resolver reads from: the stored layout of
// every item with checkpoint data, the rule of every computed buffer, the tied groups it holds,
// the values a dequantizing plan computes from codes and scales.
absl::StatusOr<ModelView> PlanView(const LoadOptions& options, const Assignment& assignment) {
  ModelView view;
  view.model = options.model;
  view.answered_by = assignment.answered_by;
  view.files = assignment.files;
  std::set<std::string> planned;
  for (const ReadItem& item : assignment.plan.ranks.front().items) {
    planned.insert(item.tensor);
    if (!item.file.empty()) {
      TensorLayout layout{item.tensor, item.dtype, item.shape, item.file, item.begin_offset, item.end_offset};
      layout.digest = item.stored_digest;
      layout.index = item.stored_index;
      view.stored[item.tensor] = std::move(layout);
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
  ML_RETURN_IF_ERROR(TakeQuantized(assignment, view));
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
    if (i < mine.items.size()) {
      const ReadItem& item = mine.items[i];
      r.is_buffer = item.file.empty() && !item.missing && !item.dequantize.has_value();
    }
    requests.push_back(std::move(r));
  }
  return requests;
}

}  // namespace

std::string PlanLabel(const StrategyOptions& options, int world_size) {
  std::string label = StrategyLabel(options);
  absl::StrAppend(&label, ", ", world_size, " ranks");
  if (options.load_dtype.has_value()) absl::StrAppend(&label, ", to ", DTypeCode(*options.load_dtype));
  if (options.dequantize) absl::StrAppend(&label, ", dequantized");
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
  load.proof_required = assignment.proof_required;
  load.plan_label = PlanLabel(options.strategy, options.world_size);
  load.started = start;
  load.rss_before_bytes = ResidentBytes();
  for (const ReadItem& item : mine.items) {
    if (!item.file.empty() && item.stored_digest.has_value()) load.has_digests = true;
    if (item.dequantize.has_value() && item.dequantize->codes.digest.has_value()) load.has_digests = true;
  }

  ML_RETURN_IF_ERROR(AllocateTensors(mine, device, options.huge_pages, &load));
  AddTiedAliases(assignment.tied_groups, load);
  ML_ASSIGN_OR_RETURN(const ModelView view, PlanView(options, assignment));
  std::vector<MaterializeRequest> requests = RequestsOf(mine, load);
  const std::vector<Resolution> plan =
      Resolve(view, requests, init, "--init-missing zeros|normal:STD", options.strategy.dequantize);
  std::optional<RankFanout> fan;
  if (options.fan_out.has_value()) {
    fan = PlanRankFanout(assignment.plan, std::move(assignment.fanout), &load.fanout_notes);
  }
  ReadSettings read = options.read;
  read.stagger_index = options.rank;  // the job's ranks start on different files
  read.stagger_count = options.world_size;
  std::unique_ptr<ProgressMeter> meter =
      ProgressMeter::Start(read.progress, read.progress_interval, PlannedTotals(requests, plan));
  read.meter = meter.get();
  ExchangeOutcome exchanged;
  ML_ASSIGN_OR_RETURN(
      FillOutcome outcome,
      fan.has_value() ? FillWithFanout(*fan, *options.fan_out, view, requests, plan, init, read, &exchanged)
                      : FillResolved(view, requests, plan, init, read));
  meter.reset();  // its last record before the rest is accounted
  load.fanout_received_bytes = exchanged.received_bytes;
  load.fanout_sent_bytes = exchanged.sent_bytes;
  for (std::string& note : exchanged.notes) load.fanout_notes.push_back(std::move(note));
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
    loaded.proof = std::move(result.proof);
    loaded.more_proofs = std::move(result.more_proofs);
  }
  load.direct_bytes = outcome.direct_bytes;
  load.streamed_bytes = outcome.streamed_bytes;
  load.streamed_bytes_by_node = std::move(outcome.streamed_bytes_by_node);
  load.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  load.rss_peak_bytes = PeakResidentBytes();
  return load;
}

}  // namespace metaload
