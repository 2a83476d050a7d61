#include "client/rank_loader.h"

#include <torch/cuda.h>

#include <cstdlib>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/buffer_init.h"
#include "client/daemon_client.h"
#include "client/host_arena.h"
#include "client/missing_init.h"
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

absl::StatusOr<torch::Device> ResolveDevice(const std::string& text, int rank) {
  if (text == "cpu") return torch::Device(torch::kCPU);
  if (text == "cuda" || absl::StartsWith(text, "cuda:")) {
    int count = static_cast<int>(torch::cuda::device_count());
    if (count == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--device ", text, ": no CUDA device is visible to this process"));
    }
    int index = 0;
    if (text == "cuda") {
      const char* local_rank = std::getenv("LOCAL_RANK");
      if (local_rank == nullptr || !absl::SimpleAtoi(local_rank, &index)) index = rank % count;
    } else if (!absl::SimpleAtoi(text.substr(5), &index)) {
      return absl::InvalidArgumentError(absl::StrCat("--device ", text, ": bad CUDA index"));
    }
    if (index < 0 || index >= count) {
      return absl::InvalidArgumentError(absl::StrCat("--device ", text, ": only ", count, " CUDA devices"));
    }
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  return absl::InvalidArgumentError(absl::StrCat("--device \"", text, "\": use cpu, cuda or cuda:N"));
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

// The box of the whole tensor a plan item's slice is (the whole tensor when unsliced).
TensorBox ItemBox(const ReadItem& item) {
  TensorBox box{std::vector<int64_t>(item.shape.size(), 0), item.shape};
  if (item.slice.has_value()) {
    box.start[item.slice->dim] = item.slice->start;
    box.length[item.slice->dim] = item.slice->length;
  }
  return box;
}

// Fills a tensor the checkpoint lacks, as the policy asks.
void InitializeMissingItem(const InitPolicy& policy, const ReadItem& item, LoadedTensor& loaded) {
  if (!policy.initializes()) {
    loaded.error = MissingTensorReason("--init-missing zeros|normal:STD");
    return;
  }
  absl::Status status = InitializeMissing(policy, loaded.name, item.shape, ItemBox(item), loaded.tensor);
  if (!status.ok()) {
    loaded.error = std::string(status.message());
    return;
  }
  loaded.filled = true;
  loaded.source = absl::StrCat("init:", policy.ToString());
}

// Aliases of tied groups whose stored tensor this rank holds: the same tensor object, so
// the same storage, read once.
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
      alias.filled = source.filled;
      alias.error = source.error;
      alias.source = "tied";
      alias.tied_to = source.name;
      load.tensors.push_back(std::move(alias));
    }
  }
}

// Every tensor of the rank allocated directly on its device (CPU tensors from one arena,
// client/host_arena.h: faulting fresh pages in, not copying, is what limits reads from the
// page cache).
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

// Decides, per item, how tensor i gets its values: computed here (missing tensors, buffers)
// or read; returns what is to be read, with `read_index[j]` the tensor target j fills.
std::vector<FillTarget> PlanReads(const RankPlan& mine, const InitPolicy& init, RankLoad* load,
                                  std::vector<size_t>* read_index) {
  std::vector<FillTarget> targets;
  for (size_t index = 0; index < mine.items.size(); ++index) {
    const ReadItem& item = mine.items[index];
    LoadedTensor& loaded = load->tensors[index];
    if (item.missing) {
      InitializeMissingItem(init, item, loaded);
      continue;
    }
    if (item.file.empty()) {
      if (item.init.empty()) {
        loaded.error = "the plan gives no checkpoint data and no rule to compute it";
        continue;
      }
      absl::Status computed = ComputeBuffer(item.init, loaded.tensor);
      loaded.filled = computed.ok();
      if (computed.ok()) loaded.source = absl::StrCat("buffer:", item.init);
      if (!computed.ok()) loaded.error = std::string(computed.message());
      continue;
    }
    FillTarget target;
    target.name = item.tensor;
    target.stored = TensorLayout{item.tensor,       item.dtype,      item.shape,      item.file,
                                 item.begin_offset, item.end_offset, item.stored_xxh3};
    target.box = ItemBox(item);
    target.dest = loaded.tensor;
    if (item.stored_xxh3.has_value()) load->has_digests = true;
    targets.push_back(std::move(target));
    read_index->push_back(index);
  }
  return targets;
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

  ML_RETURN_IF_ERROR(AllocateTensors(mine, device, options.huge_pages, &load));
  std::vector<size_t> read_index;
  std::vector<FillTarget> targets = PlanReads(mine, init, &load, &read_index);
  const FillSettings settings{.model = options.model,
                              .source = options.source,
                              .own_node = assignment.answered_by,
                              .read_threads = options.read_threads,
                              .timeout = options.timeout,
                              .cancelled = options.cancelled,
                              .stall_timeout = options.stall_timeout};
  ML_ASSIGN_OR_RETURN(FillOutcome outcome, FillTargets(targets, assignment.files, settings));
  for (size_t j = 0; j < targets.size(); ++j) {
    LoadedTensor& loaded = load.tensors[read_index[j]];
    loaded.filled = outcome.results[j].filled;
    loaded.source = outcome.results[j].source;
    loaded.error = outcome.results[j].error;
    loaded.failovers = std::move(outcome.results[j].failovers);
    loaded.digest = outcome.results[j].digest;
  }
  load.direct_bytes = outcome.direct_bytes;
  load.streamed_bytes = outcome.streamed_bytes;
  load.streamed_bytes_by_node = std::move(outcome.streamed_bytes_by_node);
  AddTiedAliases(assignment.tied_groups, load);
  load.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  load.rss_peak_bytes = PeakResidentBytes();
  return load;
}

}  // namespace metaload
