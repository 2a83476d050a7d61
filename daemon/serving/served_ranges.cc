#include "daemon/serving/served_ranges.h"

#include <algorithm>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/serving/record_check.h"
#include "util/fs/file_stamp.h"
#include "util/identifiers.h"
#include "util/log.h"
#include "util/status_macros.h"
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

ServedRanges::ServedRanges(std::string model, const Checkpoint& checkpoint, HostStamps registered)
    : model_(std::move(model)) {
  for (const TensorLayout& t : checkpoint.tensors) {
    auto& ranges = files_[absl::StrCat(checkpoint.dir, "/", t.file)].ranges;
    if (t.end_offset > t.begin_offset) ranges.emplace_back(t.begin_offset, t.end_offset);
  }
  // Stamps of files the record places no tensor in are not kept: no byte of those is served.
  for (const auto& [file, stamp] : registered) {
    auto served = files_.find(absl::StrCat(checkpoint.dir, "/", file));
    if (served != files_.end()) served->second.registered = stamp;
  }
  for (auto& [path, file] : files_) {
    std::vector<std::pair<uint64_t, uint64_t>>& ranges = file.ranges;
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
                           std::string sent_by, HostStamps registered)
    : ServedRanges(std::move(model), *checkpoint, std::move(registered)) {
  claims_ = std::move(checkpoint);
  sent_by_ = std::move(sent_by);
  verdicts_ = std::make_shared<Verdicts>();
}

absl::Status ServedRanges::CheckOpened(const std::string& path, const RandomAccessFile& file) const {
  auto served = files_.find(path);
  if (served == files_.end()) return Check(path, StridedRuns{});  // Check's refusal: not a file of it
  const FileStamp stamp = StampOf(file);
  // Before any byte or header is read: the file this host stamped, or nothing.
  ML_RETURN_IF_ERROR(CheckSameFileSinceRegistration(path, stamp, served->second.registered, model_));
  if (claims_ == nullptr) return absl::OkStatus();
  {
    // The very file checked, unchanged: a file renamed over it, or written since, has another
    // inode or ctime whatever size and mtime it was given.
    absl::MutexLock lock(&verdicts_->mu);
    auto it = verdicts_->by_path.find(path);
    if (it != verdicts_->by_path.end() && it->second.stamp == stamp) return it->second.status;
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
  const absl::Status holds = CheckFileHoldsClaims(file, model_, claimed);
  // A read that failed says nothing of the record: asked again next time.
  if (!holds.ok() && !absl::IsPermissionDenied(holds)) return holds;
  absl::Status verdict = absl::OkStatus();
  if (!holds.ok()) {
    // What differs is the file's to tell its readers, not the sender's: only the log says it.
    LogWarning(absl::StrCat(holds.message(), "; record sent by ", sent_by_, ", none of its bytes served"));
    verdict = RecordRefusal(path, model_);
  }
  absl::MutexLock lock(&verdicts_->mu);
  verdicts_->by_path[path] = Verdicts::Verdict{stamp, verdict};
  return verdict;
}

bool ServedRanges::SameClaims(const ServedRanges& other) const {
  if (claims_ == nullptr || other.claims_ == nullptr) return false;
  if (model_ != other.model_ || sent_by_ != other.sent_by_ || claims_->dir != other.claims_->dir)
    return false;
  if (files_.size() != other.files_.size()) return false;
  for (auto a = files_.begin(), b = other.files_.begin(); a != files_.end(); ++a, ++b) {
    if (a->first != b->first || a->second.registered != b->second.registered) return false;
  }
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
  const std::vector<std::pair<uint64_t, uint64_t>>& ranges = file->second.ranges;
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
