// What every strategy starts from (slots, budgets, items), and refusals that say what would
// fit: each alternative offered was planned and fits, and each GPU count is computed the way
// its strategy fills GPUs.
#include "planner/strategy/fit.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "planner/strategy/strategy_registry.h"
#include "util/error_kind.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

std::string Plural(uint64_t count, absl::string_view noun) {
  return absl::StrCat(count, " ", noun, count == 1 ? "" : "s");
}

// "a", "a or b", "a, b, or c".
std::string JoinWithOr(const std::vector<std::string>& choices) {
  std::string out;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) out.append(choices.size() == 2 ? " or " : (i + 1 == choices.size() ? ", or " : ", "));
    out.append(choices[i]);
  }
  return out;
}

// "--dtype bf16" when some floating-point tensor is held wider than 2 bytes and converting
// them all to bf16 fits.
std::optional<std::string> SmallerDtypeThatFits(const PlanRequest& request, const Strategy& strategy) {
  const StrategyOptions& options = request.options;
  if (options.load_dtype.has_value() && DTypeSizeBytes(*options.load_dtype) <= 2) return std::nullopt;
  const Skeleton& skeleton = *request.skeleton;
  absl::StatusOr<std::vector<ReadItem>> items = WholeTensorItems(
      skeleton, request.checkpoint, request.allow_missing, options.load_dtype, request.dequantize);
  if (!items.ok()) return std::nullopt;
  bool wide = false;
  for (size_t i = 0; i < items->size() && !wide; ++i) {
    const DType held = LoadDType((*items)[i]);
    wide = skeleton.tensors[i].persistent && IsConvertibleFloat(held) && DTypeSizeBytes(held) > 2;
  }
  if (!wide) return std::nullopt;
  PlanRequest alternative = request;
  alternative.options.load_dtype = DType::kBF16;
  if (!PlanWithoutAdvice(strategy, alternative, nullptr).ok()) return std::nullopt;
  return "--dtype bf16";
}

}  // namespace

std::string ReserveToString(const StrategyOptions& options) {
  return options.reserve_bytes > 0 ? FormatBytes(options.reserve_bytes)
                                   : absl::StrCat(options.reserve_fraction * 100, "%");
}

absl::StatusOr<Budgets> RankBudgets(const Cluster& cluster, const std::vector<RankSlot>& slots,
                                    const StrategyOptions& options) {
  if (!(options.reserve_fraction >= 0.0 && options.reserve_fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--reserve ", options.reserve_fraction, " must be a fraction in [0, 1) or a size"));
  }
  Budgets budgets;
  budgets.per_rank_bytes.reserve(slots.size());
  bool uniform = true;
  for (const RankSlot& slot : slots) {
    const NodeSpec& node = cluster.nodes[slot.node_index];
    const uint64_t reserve_bytes =
        options.reserve_bytes > 0
            ? options.reserve_bytes
            : static_cast<uint64_t>(static_cast<double>(node.gpu_memory_bytes) * options.reserve_fraction);
    if (node.gpu_memory_bytes > 0 && reserve_bytes >= node.gpu_memory_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("--reserve ", FormatBytes(reserve_bytes),
                                                     " leaves nothing of node ", node.name, "'s ",
                                                     FormatBytes(node.gpu_memory_bytes), " GPUs"));
    }
    // 0 stays "unknown, no limit".
    budgets.per_rank_bytes.push_back(node.gpu_memory_bytes == 0 ? 0 : node.gpu_memory_bytes - reserve_bytes);
    uniform = uniform && node.gpu_memory_bytes == cluster.nodes[slots.front().node_index].gpu_memory_bytes;
  }
  const std::string reserve = ReserveToString(options);
  const std::string size =
      uniform && !slots.empty() ? FormatBytes(cluster.nodes[slots.front().node_index].gpu_memory_bytes) : "";
  budgets.cluster_origin = cluster.origin;
  // Only `metactl plan` has --gpu-memory: a load's budgets are the node configs' gpu_memory.
  budgets.origin =
      cluster.origin == Cluster::Origin::kFlags
          ? absl::StrCat("--gpu-memory ", size, size.empty() ? "" : " ", "minus --reserve ", reserve)
          : absl::StrCat("gpu_memory ", size, size.empty() ? "" : " ", "(node configs) minus --reserve ",
                         reserve);
  return budgets;
}

std::string MoreGpusFlags(const Budgets& budgets, int64_t gpus, int64_t stages) {
  if (budgets.cluster_origin == Cluster::Origin::kFlags) {
    return stages == 0 ? absl::StrCat("--gpus ", gpus) : absl::StrCat("--gpus ", gpus, " --pp ", stages);
  }
  return stages == 0 ? absl::StrCat("world size ", gpus)
                     : absl::StrCat("world size ", gpus, ", --pp ", stages);
}

absl::Status Overflow(NoFit no_fit, NoFit* out) {
  absl::Status status = TooLargeError(no_fit.what);
  if (out != nullptr) *out = std::move(no_fit);
  return status;
}

int RequestedWorldSize(const PlanRequest& request) {
  return request.world_size == 0 ? request.cluster->total_gpus() : request.world_size;
}

absl::Status CheckBudgets(const CompactPlan& plan, const Budgets& budgets, absl::string_view why,
                          int64_t gpus_needed, NoFit* no_fit) {
  for (const CompactRank& rank : plan.ranks) {
    if (rank.budget_bytes == 0 || rank.size_bytes <= rank.budget_bytes) continue;
    NoFit overflow;
    overflow.what = absl::StrCat("rank ", rank.rank, " (node ", rank.node, ", gpu ", rank.gpu, ") needs ",
                                 FormatBytes(rank.size_bytes), " but its budget is ",
                                 FormatBytes(rank.budget_bytes), " (", budgets.origin,
                                 "): ", FormatBytes(rank.size_bytes - rank.budget_bytes), " over; ", why);
    overflow.gpus_needed = gpus_needed;
    overflow.gpus_flags = MoreGpusFlags(budgets, gpus_needed, 0);
    return Overflow(std::move(overflow), no_fit);
  }
  return absl::OkStatus();
}

absl::StatusOr<CompactPlan> PlanWithoutAdvice(const Strategy& strategy, const PlanRequest& request,
                                              NoFit* no_fit) {
  if (request.skeleton == nullptr || request.cluster == nullptr) {
    return absl::InvalidArgumentError("a plan request needs a skeleton and a cluster");
  }
  const Cluster& cluster = *request.cluster;
  PlanSetup setup;
  setup.world_size = RequestedWorldSize(request);
  ML_ASSIGN_OR_RETURN(setup.slots, cluster.Slots(setup.world_size));
  ML_ASSIGN_OR_RETURN(setup.budgets, RankBudgets(cluster, setup.slots, request.options));
  ML_ASSIGN_OR_RETURN(std::vector<ReadItem> items,
                      WholeTensorItems(*request.skeleton, request.checkpoint, request.allow_missing,
                                       request.options.load_dtype, request.dequantize));
  if (strategy.validate != nullptr) ML_RETURN_IF_ERROR(strategy.validate(request.options, setup.world_size));
  // The ranks with their places and budgets, the whole items, no references yet.
  CompactPlan plan;
  plan.model = request.skeleton->model;
  plan.strategy = std::string(strategy.name);
  plan.world_size = setup.world_size;
  plan.items = std::move(items);
  plan.ranks.resize(setup.world_size);
  for (int r = 0; r < setup.world_size; ++r) {
    CompactRank& rank = plan.ranks[r];
    rank.rank = r;
    rank.node = cluster.nodes[setup.slots[r].node_index].name;
    rank.gpu = setup.slots[r].gpu_index;
    rank.budget_bytes = setup.budgets.per_rank_bytes[r];
  }
  ML_RETURN_IF_ERROR(strategy.plan(request, setup, &plan, no_fit));
  return plan;
}

absl::StatusOr<CompactPlan> PlanOrExplain(const PlanRequest& request, const Strategy& strategy) {
  NoFit no_fit;
  absl::StatusOr<CompactPlan> plan = PlanWithoutAdvice(strategy, request, &no_fit);
  if (plan.ok() || no_fit.what.empty()) return plan;
  std::vector<std::string> fits;
  if (no_fit.gpus_needed > 0)
    fits.push_back(absl::StrCat(no_fit.gpus_needed, " GPUs (", no_fit.gpus_flags, ")"));
  if (strategy.would_fit != nullptr) strategy.would_fit(request, no_fit, &fits);
  if (std::optional<std::string> dtype = SmallerDtypeThatFits(request, strategy))
    fits.push_back(*std::move(dtype));
  // A load is held to the node configs' gpu_memory, on CPU too: --gpu-memory is `metactl plan`'s.
  fits.push_back(request.cluster->origin == Cluster::Origin::kFlags
                     ? "larger GPUs (--gpu-memory)"
                     : "larger GPUs (gpu_memory: in the node configs; CPU loads are held to it too)");
  return TooLargeError(absl::StrCat(no_fit.what, "; would fit: ", JoinWithOr(fits)));
}

int64_t PartsNeeded(absl::Span<const uint64_t> unit_bytes, uint64_t capacity) {
  if (capacity == 0) return 1;  // unknown: no limit
  int64_t parts = 1;
  uint64_t used = 0;
  for (uint64_t bytes : unit_bytes) {
    if (bytes > capacity) return 0;
    if (bytes > capacity - used) {
      ++parts;
      used = 0;
    }
    used += bytes;
  }
  return parts;
}

uint64_t TightestBudget(absl::Span<const uint64_t> budgets_bytes) {
  uint64_t tightest = 0;
  for (uint64_t budget : budgets_bytes) {
    if (budget > 0 && (tightest == 0 || budget < tightest)) tightest = budget;
  }
  return tightest;
}

NoFit UnitsNoFit(const std::vector<std::string>& unit_paths, const std::vector<uint64_t>& unit_bytes,
                 const std::vector<uint64_t>& capacities, const Budgets& budgets, absl::string_view part,
                 absl::string_view per_rank, absl::string_view never_split) {
  auto path = [&](size_t u) { return unit_paths[u].empty() ? std::string("(root)") : unit_paths[u]; };
  const auto [smallest, largest] = std::minmax_element(capacities.begin(), capacities.end());
  const size_t biggest_unit = std::max_element(unit_bytes.begin(), unit_bytes.end()) - unit_bytes.begin();
  NoFit no_fit;
  if (unit_bytes[biggest_unit] > *largest) {
    no_fit.what = absl::StrCat(
        "unit ", path(biggest_unit), " needs ", FormatBytes(unit_bytes[biggest_unit]), per_rank, " but ",
        *smallest == *largest ? "a GPU's budget is " : "the largest GPU budget is ", FormatBytes(*largest),
        " (", budgets.origin, "): ", FormatBytes(unit_bytes[biggest_unit] - *largest), " over, and ",
        never_split, " never splits a unit");
    return no_fit;
  }
  // Each part as full as it goes, in order: what is left over is what no partition places.
  size_t next = 0;
  for (uint64_t capacity : capacities) {
    uint64_t used = 0;
    while (next < unit_bytes.size() && unit_bytes[next] <= capacity - used) used += unit_bytes[next++];
  }
  uint64_t total_bytes = 0, left_bytes = 0;  // the strategies checked that the total fits
  for (size_t u = 0; u < unit_bytes.size(); ++u) {
    total_bytes += unit_bytes[u];
    if (u >= next) left_bytes += unit_bytes[u];
  }
  if (next == unit_bytes.size()) return no_fit;  // REQUIRES broken: every unit fits
  no_fit.what = absl::StrCat(
      "the model's ", Plural(unit_bytes.size(), "unit"), " (", FormatBytes(total_bytes), per_rank,
      ") do not fit in order on ", Plural(capacities.size(), part), " with ",
      capacities.size() == 1 ? "a budget of " : "budgets of ", FormatBytes(*smallest),
      *smallest == *largest ? "" : absl::StrCat(" to ", FormatBytes(*largest)), " (", budgets.origin,
      "): ", Plural(unit_bytes.size() - next, "unit"), " from ", path(next), " on (", FormatBytes(left_bytes),
      per_rank.empty() ? "" : " per rank", ") ", next + 1 == unit_bytes.size() ? "is" : "are", " left over");
  return no_fit;
}

}  // namespace metaload
