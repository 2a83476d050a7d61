// ValidatePlan: the global check every strategy's plan must pass (strategy.h), like
// torch.distributed.checkpoint's validator, but naming the tensor, the slice and the ranks.
#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "planner/format/tensor_layout.h"
#include "planner/plan/slice.h"
#include "planner/strategy/strategy.h"
#include "util/error_kind.h"
#include "util/units.h"

namespace metaload {
namespace {

struct Placement {
  int rank = 0;
  const ReadItem* item = nullptr;
};

std::string SliceToString(const ReadItem& item) {
  if (!item.slice.has_value()) return "whole";
  return absl::StrCat("dim ", item.slice->dim, " [", item.slice->start, ", ",
                      item.slice->start + item.slice->length, ")");
}

std::string RanksToString(const std::vector<int>& ranks) {
  constexpr size_t kShown = 8;
  std::string out;
  for (size_t i = 0; i < ranks.size() && i < kShown; ++i) absl::StrAppend(&out, i == 0 ? "" : ", ", ranks[i]);
  if (ranks.size() > kShown) absl::StrAppend(&out, ", ...");
  return out;
}

// Slices on one dim must cover every index of it the same number of times: once, or (key/value
// heads replicated on several ranks of a tp group) m times.
// REQUIRES: placements sorted by slice start, then rank; all sliced on `dim`, inside the tensor.
absl::Status CheckSliceCoverage(const SkeletonTensor& tensor, const std::vector<Placement>& placements,
                                int dim, const std::string& in_replica) {
  const int64_t extent = tensor.shape[dim];
  const std::string prefix = absl::StrCat("tensor ", tensor.name, " ", ShapeToString(tensor.shape), ": ");
  auto start_of = [](const Placement& p) { return p.item->slice->start; };
  auto end_of = [](const Placement& p) { return p.item->slice->start + p.item->slice->length; };
  // Sweep the dim from 0: `ends` holds the ends of the slices covering [at, ...).
  std::vector<int64_t> ends;
  size_t next = 0, multiplicity = 0;
  int64_t at = 0, first_end = 0;
  while (at < extent) {
    while (next < placements.size() && start_of(placements[next]) == at)
      ends.push_back(end_of(placements[next++]));
    ends.erase(std::remove_if(ends.begin(), ends.end(), [at](int64_t end) { return end <= at; }), ends.end());
    if (ends.empty()) {
      if (next == placements.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(prefix, "slices on dim ", dim, " end at ", at, ", not ", extent, in_replica));
      }
      const Placement& p = placements[next];
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "rank ", p.rank, " holds ", SliceToString(*p.item), ", leaving a gap at ", at, in_replica));
    }
    const int64_t segment_end = std::min(*std::min_element(ends.begin(), ends.end()),
                                         next < placements.size() ? start_of(placements[next]) : extent);
    if (multiplicity == 0) {
      multiplicity = ends.size();
      first_end = segment_end;
    } else if (ends.size() > multiplicity && multiplicity == 1) {
      // Only a slice starting at `at` raises the count: the last one taken.
      const Placement& p = placements[next - 1];
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "rank ", p.rank, " holds ", SliceToString(*p.item),
                       ", overlapping the slice before it at ", at, in_replica));
    } else if (ends.size() != multiplicity) {
      std::vector<int> ranks;
      for (const Placement& p : placements) {
        if (start_of(p) <= at && end_of(p) > at) ranks.push_back(p.rank);
      }
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "dim ", dim, " [", at, ", ", segment_end, ") is held by ", ranks.size(),
                       ranks.size() == 1 ? " rank (" : " ranks (", RanksToString(ranks), ") but [0, ",
                       first_end, ") by ", multiplicity, in_replica));
    }
    at = segment_end;
  }
  return absl::OkStatus();
}

// REQUIRES: the items' shapes and slice bounds were checked.
absl::Status CheckCoverage(const SkeletonTensor& tensor, std::vector<Placement>& placements, int group_size,
                           const std::string& in_replica) {
  if (placements.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", tensor.name, " is assigned to no rank",
                                                   in_replica, " (it would stay on meta)"));
  }
  // Placements arrive in rank order: a rank holding the tensor twice shows as neighbours.
  for (size_t i = 1; i < placements.size(); ++i) {
    if (placements[i].rank == placements[i - 1].rank) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", tensor.name, " is assigned to rank ",
                                                     placements[i].rank, " twice (",
                                                     SliceToString(*placements[i - 1].item), " and ",
                                                     SliceToString(*placements[i].item), ")", in_replica));
    }
  }
  std::sort(placements.begin(), placements.end(), [](const Placement& a, const Placement& b) {
    const int64_t a_start = a.item->slice ? a.item->slice->start : -1;
    const int64_t b_start = b.item->slice ? b.item->slice->start : -1;
    return a_start != b_start ? a_start < b_start : a.rank < b.rank;
  });
  const Placement& first = placements.front();
  size_t whole = 0;
  for (const Placement& p : placements) {
    if (p.rank / group_size != first.rank / group_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", tensor.name, " is assigned to rank ", first.rank, " and to rank ", p.rank,
          group_size > 1 ? absl::StrCat(", which are in different groups of ", group_size) : std::string(),
          in_replica));
    }
    if (!p.item->slice.has_value()) ++whole;
  }
  if (whole > 0) {
    // Held whole: by every rank of its group (replicated), and by nothing else.
    if (whole != placements.size()) {
      const Placement& sliced = placements[whole];
      return absl::InvalidArgumentError(absl::StrCat("tensor ", tensor.name, " is assigned to rank ",
                                                     first.rank, " (whole) and to rank ", sliced.rank, " (",
                                                     SliceToString(*sliced.item), ")", in_replica));
    }
    if (placements.size() != static_cast<size_t>(group_size)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", tensor.name, " is held whole by ",
                                                     placements.size(), " of the ", group_size,
                                                     " ranks of its group", in_replica));
    }
    return absl::OkStatus();
  }
  const int dim = first.item->slice->dim;
  for (const Placement& p : placements) {
    if (p.item->slice->dim != dim) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", tensor.name, " is sliced on dim ", dim,
                                                     " by rank ", first.rank, " but on dim ",
                                                     p.item->slice->dim, " by rank ", p.rank, in_replica));
    }
  }
  // Empty slices (the ranks past the end of an uneven split) cover nothing.
  placements.erase(std::remove_if(placements.begin(), placements.end(),
                                  [](const Placement& p) { return p.item->slice->length == 0; }),
                   placements.end());
  return CheckSliceCoverage(tensor, placements, dim, in_replica);
}

}  // namespace

absl::Status ValidatePlan(const Plan& plan, const Skeleton& skeleton) {
  const int world = plan.world_size;
  if (world != static_cast<int>(plan.ranks.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan has world size ", world, " but ", plan.ranks.size(), " ranks"));
  }
  if (plan.replicas < 1 || plan.group_size < 1 || world % plan.replicas != 0 ||
      (world / plan.replicas) % plan.group_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("plan has world size ", world, ", ", plan.replicas,
                                                   " replicas and groups of ", plan.group_size,
                                                   ": they must divide evenly"));
  }
  const int replica_size = world / plan.replicas;
  absl::flat_hash_map<std::string, size_t> tensor_index;
  for (size_t i = 0; i < skeleton.tensors.size(); ++i) tensor_index.emplace(skeleton.tensors[i].name, i);
  std::vector<std::vector<Placement>> placements(skeleton.tensors.size());
  for (int r = 0; r < world; ++r) {
    const RankPlan& rank = plan.ranks[r];
    if (rank.rank != r)
      return absl::InvalidArgumentError(absl::StrCat("ranks[", r, "] says it is rank ", rank.rank));
    uint64_t items_bytes = 0;
    for (const ReadItem& item : rank.items) {
      auto found = tensor_index.find(item.tensor);
      if (found == tensor_index.end()) {
        return absl::InvalidArgumentError(absl::StrCat("rank ", r, " has an item for tensor ", item.tensor,
                                                       ", which the skeleton does not have"));
      }
      const SkeletonTensor& tensor = skeleton.tensors[found->second];
      if (item.shape != tensor.shape) {
        return absl::InvalidArgumentError(absl::StrCat("rank ", r, ": tensor ", item.tensor, " has shape ",
                                                       ShapeToString(item.shape), " but the skeleton says ",
                                                       ShapeToString(tensor.shape)));
      }
      if (item.slice.has_value()) {
        const TensorSlice& slice = *item.slice;
        // An empty slice is a rank's piece past the end of an uneven split (ChunkSlice).
        if (slice.dim < 0 || slice.dim >= static_cast<int>(tensor.shape.size()) || slice.start < 0 ||
            slice.length < 0 || slice.start > tensor.shape[slice.dim] ||
            slice.length > tensor.shape[slice.dim] - slice.start) {
          return absl::InvalidArgumentError(absl::StrCat("rank ", r, ": tensor ", item.tensor, " ",
                                                         ShapeToString(tensor.shape), " has slice ",
                                                         SliceToString(item), ", outside the tensor"));
        }
        if (item.size_bytes != SliceSizeBytes(item.shape, LoadDType(item), item.slice)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "rank ", r, ": tensor ", item.tensor, " slice ", SliceToString(item), " says ", item.size_bytes,
              " bytes but holds ", SliceSizeBytes(item.shape, LoadDType(item), item.slice)));
        }
      }
      if (tensor.persistent) placements[found->second].push_back(Placement{r, &item});
      if (AddOverflows(items_bytes, item.size_bytes, &items_bytes)) {
        return absl::InvalidArgumentError(absl::StrCat("rank ", r, ": item sizes add up past 2^64 bytes"));
      }
    }
    if (items_bytes != rank.size_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", r, " says it holds ", rank.size_bytes,
                                                     " bytes but its items add up to ", items_bytes));
    }
    if (rank.budget_bytes > 0 && rank.size_bytes > rank.budget_bytes) {
      return TooLargeError(absl::StrCat("rank ", r, " holds ", FormatBytes(rank.size_bytes),
                                        ", over its budget of ", FormatBytes(rank.budget_bytes)));
    }
    if ((r + 1) % replica_size != 0) continue;
    // The last rank of a replica: every persistent tensor must be covered inside it.
    const std::string in_replica =
        plan.replicas == 1 ? std::string() : absl::StrCat(" in replica ", r / replica_size);
    for (size_t t = 0; t < skeleton.tensors.size(); ++t) {
      if (!skeleton.tensors[t].persistent) continue;
      absl::Status status = CheckCoverage(skeleton.tensors[t], placements[t], plan.group_size, in_replica);
      if (!status.ok()) return status;
      placements[t].clear();
    }
  }
  return absl::OkStatus();
}

}  // namespace metaload
