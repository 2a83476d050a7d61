#include "daemon/exec/work_queue.h"

#include <utility>

namespace metaload {

WorkQueue::WorkQueue(std::string name, int threads, size_t max_queued)
    : name_(std::move(name)), max_queued_(max_queued) {
  threads_.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

WorkQueue::~WorkQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

bool WorkQueue::Post(std::function<void()> job) {
  absl::MutexLock lock(&mu_);
  if (jobs_.size() >= max_queued_) return false;
  jobs_.push_back(std::move(job));
  return true;
}

size_t WorkQueue::queued() const {
  absl::MutexLock lock(&mu_);
  return jobs_.size();
}

bool WorkQueue::ReadyLocked() const { return !jobs_.empty() || stopping_; }

void WorkQueue::Run() {
  while (true) {
    std::function<void()> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &WorkQueue::ReadyLocked));
      if (jobs_.empty()) return;  // stopping, and nothing left to run
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace metaload
