#include "daemon/exec/answer_limit.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace metaload {

AnswerLimit::AnswerLimit(size_t limit, WorkQueue* queue, size_t max_waiting)
    : limit_(limit), queue_(queue), max_waiting_(max_waiting) {}

void AnswerLimit::Submit(std::function<void()> job, Refuse refuse) {
  {
    absl::MutexLock lock(&mu_);
    if (in_flight_ >= limit_) {
      if (waiting_.size() < max_waiting_) {
        waiting_.emplace_back(std::move(job), std::move(refuse));
        return;
      }
      // Refused outright: the call still takes a slot until it gives it back.
      ++in_flight_;
      job = nullptr;
    } else {
      ++in_flight_;
    }
  }
  if (job == nullptr) {
    refuse(absl::ResourceExhaustedError(
        absl::StrCat(max_waiting_, " answers are waiting to be built; try again")));
    return;
  }
  Run(std::move(job), refuse);
}

void AnswerLimit::Run(std::function<void()> job, const Refuse& refuse) {
  if (!queue_->Post(std::move(job))) {
    refuse(absl::ResourceExhaustedError(
        absl::StrCat("the daemon's ", queue_->name(), " queue is full; try again")));
  }
}

void AnswerLimit::Release() {
  std::pair<std::function<void()>, Refuse> next;
  {
    absl::MutexLock lock(&mu_);
    if (waiting_.empty()) {
      --in_flight_;
      return;
    }
    next = std::move(waiting_.front());  // the slot passes to the next in line
    waiting_.pop_front();
  }
  Run(std::move(next.first), next.second);
}

}  // namespace metaload
