#include "client/read/source_order.h"

#include <algorithm>

namespace metaload {

ReadFailure ClassifyReadFailure(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kFailedPrecondition:  // "file changed since registration"
    case absl::StatusCode::kOutOfRange:          // the range passes the file's end
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kUnauthenticated:
      return ReadFailure::kFatal;
    case absl::StatusCode::kDataLoss:
      return ReadFailure::kDataLoss;
    default:  // UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, INTERNAL, UNKNOWN, ...
      return ReadFailure::kRetry;
  }
}

SourceCursor::SourceCursor(size_t source_count, RetryPolicy policy)
    : count_(std::max<size_t>(source_count, 1)), policy_(policy) {}

RetryStep SourceCursor::OnFailure(absl::StatusCode code, bool progressed) {
  RetryStep step;
  const ReadFailure kind = ClassifyReadFailure(code);
  if (kind == ReadFailure::kFatal) {
    step.give_up = true;
    return step;
  }
  if (kind == ReadFailure::kDataLoss) {
    if (data_loss_retried_) {
      step.give_up = true;
      return step;
    }
    data_loss_retried_ = true;
  }
  if (progressed) failures_ = 0;  // a new break, not the same dead source again
  ++failures_;
  const int attempts = std::max(policy_.rounds * static_cast<int>(count_), policy_.min_attempts);
  if (failures_ >= attempts) {
    step.give_up = true;
    return step;
  }
  current_ = (current_ + 1) % count_;
  step.next = current_;
  // Sources not yet tried since the last progress are tried at once; a repeat waits.
  const int repeat = failures_ - static_cast<int>(count_);
  if (repeat >= 0) {
    absl::Duration wait = policy_.first_backoff;
    for (int i = 0; i < repeat && wait < policy_.max_backoff; ++i) wait *= 2;
    step.backoff = std::min(wait, policy_.max_backoff);
  }
  return step;
}

void SourceHealth::MarkFailed(const std::string& source, absl::Time now) {
  absl::MutexLock lock(&mu_);
  failed_at_[source] = now;
}

void SourceHealth::MarkOk(const std::string& source) {
  absl::MutexLock lock(&mu_);
  failed_at_.erase(source);
  gave_up_at_.erase(source);
}

void SourceHealth::MarkGaveUp(const std::vector<std::string>& sources, absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (const std::string& source : sources) gave_up_at_[source] = now;
}

bool SourceHealth::GaveUpLately(const std::vector<std::string>& sources, absl::Time now) const {
  absl::MutexLock lock(&mu_);
  for (const std::string& source : sources) {
    auto it = gave_up_at_.find(source);
    if (it == gave_up_at_.end() || now - it->second >= cooldown_) return false;
  }
  return !sources.empty();
}

std::vector<size_t> SourceHealth::Order(const std::vector<std::string>& sources, absl::Time now) const {
  std::vector<size_t> healthy, failed;
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < sources.size(); ++i) {
    auto it = failed_at_.find(sources[i]);
    (it != failed_at_.end() && now - it->second < cooldown_ ? failed : healthy).push_back(i);
  }
  healthy.insert(healthy.end(), failed.begin(), failed.end());
  return healthy;
}

}  // namespace metaload
