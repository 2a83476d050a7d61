// Budgets, and refusals that say what would fit: each alternative offered was planned and
// fits, and each GPU count is computed the way its strategy fills GPUs.
#include "planner/strategy/fit.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
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

int WorldOf(const PlanRequest& request) {
  return request.world_size == 0 ? request.cluster->total_gpus() : request.world_size;
}

// The tp strategy with the smallest group size above today's that fits the same GPUs, as
// flags: for layers a tp plan of the same world; for tp the same data-parallel replicas (and
// --pp scaled when the user gave it); for replicate whole-model groups (--pp 1). When none
// does and more GPUs would not help today's strategy, the smallest group size that fits more
// GPUs (more pipeline stages), with their count; not for replicate, whose groups are replicas.
std::optional<std::string> SmallestTpThatFits(const PlanRequest& request, bool more_gpus_help) {
  const StrategyOptions& options = request.options;
  const int world = WorldOf(request);
  int largest_node = 0;
  for (const NodeSpec& node : request.cluster->nodes) largest_node = std::max(largest_node, node.gpu_count);
  int first = 2, replicas = 1;
  if (options.strategy == "tp") {
    absl::StatusOr<TpShape> shape = ResolveTpShape(options, world);
    if (!shape.ok()) return std::nullopt;
    first = shape->tp + 1;
    replicas = shape->replicas;
  } else if (options.strategy != "layers" && options.strategy != "replicate") {
    return std::nullopt;
  }
  std::optional<std::string> on_more_gpus;
  for (int tp = first; tp <= std::min(largest_node, world); ++tp) {
    const int64_t group_ranks = int64_t{tp} * replicas;  // both at most world: no overflow
    if (world % group_ranks != 0) continue;
    PlanRequest alternative = request;
    alternative.options.strategy = "tp";
    alternative.options.tp = tp;
    std::string flags = absl::StrCat(options.strategy == "tp" ? "" : "--strategy tp ", "--tp ", tp);
    std::string pp_flag;  // on the same GPUs only: with more GPUs, the count's flags say --pp
    if (options.strategy == "replicate") {
      alternative.options.pp = 1;
      pp_flag = " --pp 1";
    } else if (options.strategy == "tp" && options.pp != 0) {
      alternative.options.pp = static_cast<int>(world / group_ranks);
      pp_flag = absl::StrCat(" --pp ", alternative.options.pp);
    }
    NoFit no_fit;
    if (TpPlan(alternative, &no_fit).ok()) return flags + pp_flag;
    if (!more_gpus_help && !on_more_gpus.has_value() && no_fit.gpus_needed > 0 &&
        options.strategy != "replicate") {
      on_more_gpus = absl::StrCat(flags, " on ", no_fit.gpus_needed, " GPUs (", no_fit.gpus_flags, ")");
    }
  }
  return on_more_gpus;
}

// "--dtype bf16" when some floating-point tensor is held wider than 2 bytes and converting
// them all to bf16 fits.
std::optional<std::string> SmallerDtypeThatFits(const PlanRequest& request, PlanFn plan_fn) {
  const StrategyOptions& options = request.options;
  if (options.load_dtype.has_value() && DTypeSizeBytes(*options.load_dtype) <= 2) return std::nullopt;
  const Skeleton& skeleton = *request.skeleton;
  absl::StatusOr<std::vector<ReadItem>> items =
      WholeTensorItems(skeleton, request.checkpoint, request.allow_missing, options.load_dtype);
  if (!items.ok()) return std::nullopt;
  bool wide = false;
  for (size_t i = 0; i < items->size() && !wide; ++i) {
    const DType held = LoadDType((*items)[i]);
    wide = skeleton.tensors[i].persistent && IsConvertibleFloat(held) && DTypeSizeBytes(held) > 2;
  }
  if (!wide) return std::nullopt;
  PlanRequest alternative = request;
  alternative.options.load_dtype = DType::kBF16;
  if (!plan_fn(alternative, nullptr).ok()) return std::nullopt;
  return "--dtype bf16";
}

}  // namespace

absl::StatusOr<TpShape> ResolveTpShape(const StrategyOptions& options, int world) {
  const int tp = options.tp;
  if (tp < 1 || tp > world || world % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tp ", tp, " must be at least 1 and divide the world size ", world));
  }
  if (options.pp < 0 || options.pp > world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pp ", options.pp, " must be between 1 and the world size ", world, " (or 0: world size / --tp)"));
  }
  const int pp = options.pp == 0 ? world / tp : options.pp;
  const int64_t group_ranks = int64_t{tp} * pp;  // tp, pp <= world < 2^31: fits in 64 bits
  if (world % group_ranks != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--tp ", tp, " x --pp ", pp,
                                                   " must divide the world size ", world,
                                                   " (the rest are data-parallel replicas)"));
  }
  return TpShape{tp, pp, static_cast<int>(world / group_ranks)};
}

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
  budgets.origin = uniform && !slots.empty()
                       ? absl::StrCat("--gpu-memory ",
                                      FormatBytes(cluster.nodes[slots.front().node_index].gpu_memory_bytes),
                                      " minus --reserve ", reserve)
                       : absl::StrCat("--gpu-memory minus --reserve ", reserve);
  return budgets;
}

absl::Status Overflow(NoFit no_fit, NoFit* out) {
  absl::Status status = absl::ResourceExhaustedError(no_fit.what);
  if (out != nullptr) *out = std::move(no_fit);
  return status;
}

absl::StatusOr<CompactPlan> PlanOrExplain(const PlanRequest& request, PlanFn plan_fn) {
  NoFit no_fit;
  absl::StatusOr<CompactPlan> plan = plan_fn(request, &no_fit);
  if (plan.ok() || no_fit.what.empty()) return plan;
  std::vector<std::string> fits;
  if (no_fit.gpus_needed > 0)
    fits.push_back(absl::StrCat(no_fit.gpus_needed, " GPUs (", no_fit.gpus_flags, ")"));
  if (std::optional<std::string> tp = SmallestTpThatFits(request, no_fit.gpus_needed > 0))
    fits.push_back(*std::move(tp));
  if (request.options.strategy == "replicate" && FsdpPlan(request, nullptr).ok()) {
    fits.push_back("--strategy fsdp");
  }
  if (std::optional<std::string> dtype = SmallerDtypeThatFits(request, plan_fn))
    fits.push_back(*std::move(dtype));
  fits.push_back("larger GPUs (--gpu-memory)");
  return absl::ResourceExhaustedError(absl::StrCat(no_fit.what, "; would fit: ", JoinWithOr(fits)));
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
