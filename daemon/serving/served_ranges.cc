#include "daemon/serving/served_ranges.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "util/identifiers.h"
#include "util/units.h"

namespace metaload {

ServedRanges::ServedRanges(std::string model, const Checkpoint& checkpoint) : model_(std::move(model)) {
  for (const TensorLayout& t : checkpoint.tensors) {
    auto& ranges = files_[absl::StrCat(checkpoint.dir, "/", t.file)];
    if (t.end_offset > t.begin_offset) ranges.emplace_back(t.begin_offset, t.end_offset);
  }
  for (auto& [path, ranges] : files_) {
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<uint64_t, uint64_t>> merged;
    for (const auto& [begin, end] : ranges) {
      if (!merged.empty() && begin <= merged.back().second) {
        merged.back().second = std::max(merged.back().second, end);
      } else {
        merged.emplace_back(begin, end);
      }
    }
    ranges = std::move(merged);
  }
}

absl::Status ServedRanges::Check(const std::string& path, const StridedRuns& runs) const {
  auto file = files_.find(path);
  if (file == files_.end()) {
    return absl::PermissionDeniedError(absl::StrCat("ReadRange: ", QuoteForMessage(path, 512),
                                                    " is not a file of registered model ",
                                                    QuoteForMessage(model_)));
  }
  const std::vector<std::pair<uint64_t, uint64_t>>& ranges = file->second;
  if (runs.run_bytes == 0) return absl::OkStatus();
  // Each step finds the range holding run i, then skips every later run that range holds too:
  // the cost grows with the ranges a request spans, not with its (hostile) run count.
  for (uint64_t i = 0; i < runs.run_count;) {
    uint64_t start = 0, end = 0;
    if (MulOverflows(i, runs.stride_bytes, &start) || AddOverflows(runs.first_offset, start, &start) ||
        AddOverflows(start, runs.run_bytes, &end)) {
      return absl::PermissionDeniedError(absl::StrCat(
          "ReadRange: run ", i, " of ", QuoteForMessage(path, 512), " ends past 2^64 bytes (offset ",
          runs.first_offset, ", stride ", runs.stride_bytes, ", run ", runs.run_bytes, " bytes)"));
    }
    // The last range beginning at or before `start`.
    auto holder = std::upper_bound(ranges.begin(), ranges.end(), start,
                                   [](uint64_t offset, const auto& range) { return offset < range.first; });
    if (holder == ranges.begin() || std::prev(holder)->second < end) {
      return absl::PermissionDeniedError(
          absl::StrCat("ReadRange: bytes [", start, ", ", end, ") of ", QuoteForMessage(path, 512),
                       " are not inside a tensor of registered model ", QuoteForMessage(model_)));
    }
    const uint64_t range_end = std::prev(holder)->second;
    if (runs.stride_bytes == 0) break;  // every run is this one
    // Runs i..last all end inside the range: first_offset + last * stride + run_bytes <= range_end.
    const uint64_t last = (range_end - runs.run_bytes - runs.first_offset) / runs.stride_bytes;
    i = std::max(i, last) + 1;
  }
  return absl::OkStatus();
}

}  // namespace metaload
