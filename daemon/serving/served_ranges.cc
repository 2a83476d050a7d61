#include "daemon/serving/served_ranges.h"

#include <algorithm>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/serving/record_check.h"
#include "util/fs/file_stamp.h"
#include "util/identifiers.h"
#include "util/log.h"
#include "util/units.h"

namespace metaload {

struct ServedRanges::Verdicts {
  struct Verdict {
    FileStamp stamp;  // of the file checked
    absl::Status status;
  };
  absl::Mutex mu;
  // Keyed by the paths Check admitted: files of the record, so bounded by the record.
  std::map<std::string, Verdict> by_path ABSL_GUARDED_BY(mu);
};

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

ServedRanges::ServedRanges(std::string model, std::shared_ptr<const Checkpoint> checkpoint,
                           std::string sent_by)
    : ServedRanges(std::move(model), *checkpoint) {
  claims_ = std::move(checkpoint);
  sent_by_ = std::move(sent_by);
  verdicts_ = std::make_shared<Verdicts>();
}

absl::Status ServedRanges::CheckOpened(const std::string& path, const RandomAccessFile& file) const {
  if (claims_ == nullptr) return absl::OkStatus();
  const FileStamp stamp = StampOf(file);
  {
    absl::MutexLock lock(&verdicts_->mu);
    auto it = verdicts_->by_path.find(path);
    if (it != verdicts_->by_path.end() && it->second.stamp.size_bytes == stamp.size_bytes &&
        it->second.stamp.mtime_ns == stamp.mtime_ns) {
      return it->second.status;
    }
  }
  // The record's tensors in this file: `path` is claims_->dir + "/" + their file (Check passed).
  const std::string& dir = claims_->dir;
  std::vector<const TensorLayout*> claimed;
  if (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/') {
    const absl::string_view file_name = absl::string_view(path).substr(dir.size() + 1);
    for (const TensorLayout& t : claims_->tensors) {
      if (t.file == file_name) claimed.push_back(&t);
    }
  }
  absl::Status verdict = CheckFileHoldsClaims(file, model_, claimed);
  // A read that failed says nothing of the record: asked again next time.
  if (!verdict.ok() && !absl::IsPermissionDenied(verdict)) return verdict;
  if (!verdict.ok()) {
    LogWarning(absl::StrCat(verdict.message(), "; record sent by ", sent_by_, ", none of its bytes served"));
  }
  absl::MutexLock lock(&verdicts_->mu);
  verdicts_->by_path[path] = Verdicts::Verdict{stamp, verdict};
  return verdict;
}

bool ServedRanges::SameClaims(const ServedRanges& other) const {
  if (claims_ == nullptr || other.claims_ == nullptr) return false;
  if (model_ != other.model_ || sent_by_ != other.sent_by_ || claims_->dir != other.claims_->dir)
    return false;
  const std::vector<TensorLayout>& a = claims_->tensors;
  const std::vector<TensorLayout>& b = other.claims_->tensors;
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].dtype != b[i].dtype || a[i].shape != b[i].shape ||
        a[i].file != b[i].file || a[i].begin_offset != b[i].begin_offset ||
        a[i].end_offset != b[i].end_offset) {
      return false;
    }
  }
  return true;
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
