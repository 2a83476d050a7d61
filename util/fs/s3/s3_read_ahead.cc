#include "util/fs/s3/s3_read_ahead.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace metaload {

S3ReadAhead::Mapping::~Mapping() {
  if (data != nullptr) munmap(data, size);
}

S3ReadAhead::S3ReadAhead(uint64_t begin, uint64_t end, uint64_t part_bytes, int window_parts,
                         ReadAheadBudget* budget, Fetch fetch)
    : begin_(begin),
      end_(std::max(begin, end)),
      part_bytes_(std::max<uint64_t>(part_bytes, 1)),
      window_parts_(static_cast<size_t>(std::max(window_parts, 1))),
      budget_(budget),
      fetch_(std::move(fetch)) {
  {
    absl::MutexLock lock(&budget_->mu_);
    next_offset_ = begin_;
  }
  const uint64_t span = end_ - begin_;
  const uint64_t parts = span / part_bytes_ + (span % part_bytes_ != 0 ? 1 : 0);
  const size_t fetchers = static_cast<size_t>(std::min<uint64_t>(window_parts_, parts));
  fetchers_.reserve(fetchers);
  for (size_t i = 0; i < fetchers; ++i) fetchers_.emplace_back([this] { Work(); });
}

void S3ReadAhead::Stop() {
  absl::MutexLock lock(&budget_->mu_);
  stopping_ = true;
  cancelled_ = true;
}

S3ReadAhead::~S3ReadAhead() {
  Stop();
  for (std::thread& fetcher : fetchers_) fetcher.join();
  absl::MutexLock lock(&budget_->mu_);
  while (!parts_.empty()) DropFront();
}

uint64_t S3ReadAhead::fetches() const {
  absl::MutexLock lock(&budget_->mu_);
  return fetches_;
}

bool S3ReadAhead::CanStart() const {
  if (stopping_ || !failure_.ok() || next_offset_ >= end_) return false;
  if (wanted_offset_ == next_offset_) return true;  // a reader waits for it: regardless of the budget
  if (parts_.size() >= window_parts_) return false;
  const uint64_t size = std::min(part_bytes_, end_ - next_offset_);
  return budget_->used_bytes_ <= budget_->limit_bytes_ &&
         size <= budget_->limit_bytes_ - budget_->used_bytes_;
}

void S3ReadAhead::DropFront() {
  std::shared_ptr<Part> part = std::move(parts_.front());
  parts_.pop_front();
  if (part->done) {
    budget_->used_bytes_ -= part->size;
  } else {
    part->dropped = true;  // its fetcher gives the bytes back
  }
}

void S3ReadAhead::Work() {
  for (;;) {
    std::shared_ptr<Part> part;
    {
      absl::MutexLock lock(&budget_->mu_);
      budget_->mu_.Await(absl::Condition(
          +[](S3ReadAhead* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->budget_->mu_) {
            return self->stopping_ || self->CanStart();
          },
          this));
      if (stopping_) return;
      part = std::make_shared<Part>();
      part->offset = next_offset_;
      part->size = std::min(part_bytes_, end_ - next_offset_);
      next_offset_ += part->size;
      if (wanted_offset_ == part->offset) wanted_offset_ = UINT64_MAX;
      budget_->used_bytes_ += part->size;
      budget_->peak_bytes_ = std::max(budget_->peak_bytes_, budget_->used_bytes_);
      ++fetches_;
      parts_.push_back(part);
    }
    absl::Status status;
    void* mapped = mmap(nullptr, static_cast<size_t>(part->size), PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) {
      status = absl::ResourceExhaustedError(
          absl::StrCat("cannot map ", part->size, " bytes for a part read ahead"));
    } else {
      part->bytes.data = static_cast<uint8_t*>(mapped);
      part->bytes.size = static_cast<size_t>(part->size);
      status = fetch_(part->offset, absl::MakeSpan(part->bytes.data, part->bytes.size), &cancelled_);
    }
    absl::MutexLock lock(&budget_->mu_);
    part->status = std::move(status);
    part->done = true;
    if (!part->status.ok() && failure_.ok()) failure_ = part->status;
    if (part->dropped) budget_->used_bytes_ -= part->size;
  }
}

std::optional<absl::Status> S3ReadAhead::Read(uint64_t offset, absl::Span<uint8_t> out) {
  if (out.empty()) return absl::OkStatus();
  uint64_t end = 0;
  if (offset < begin_ || __builtin_add_overflow(offset, static_cast<uint64_t>(out.size()), &end) ||
      end > end_) {
    return std::nullopt;
  }
  absl::MutexLock lock(&budget_->mu_);
  if (stopping_) return absl::CancelledError("the read was cancelled");
  // Read again: what was read past is gone.
  if (!parts_.empty() ? offset < parts_.front()->offset : offset < next_offset_) return std::nullopt;
  if (offset >= next_offset_) {  // skipped past every part started: start again here
    while (!parts_.empty()) DropFront();
    next_offset_ = offset;
  }
  uint64_t position = offset;
  while (position < end) {
    while (!parts_.empty() && parts_.front()->offset + parts_.front()->size <= position) DropFront();
    if (parts_.empty()) {
      wanted_offset_ = next_offset_;  // == position: parts start in order from where reading is
      budget_->mu_.Await(absl::Condition(
          +[](S3ReadAhead* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->budget_->mu_) {
            return self->stopping_ || !self->parts_.empty() || !self->failure_.ok();
          },
          this));
      if (stopping_) return absl::CancelledError("the read was cancelled");
      if (parts_.empty()) return failure_;
      continue;
    }
    std::shared_ptr<Part> part = parts_.front();
    std::pair<S3ReadAhead*, Part*> waited(this, part.get());
    budget_->mu_.Await(absl::Condition(
        +[](std::pair<S3ReadAhead*, Part*>* w)
             ABSL_NO_THREAD_SAFETY_ANALYSIS { return w->first->stopping_ || w->second->done; },
        &waited));
    if (stopping_) return absl::CancelledError("the read was cancelled");
    if (!part->status.ok()) return part->status;
    const uint64_t n = std::min(end, part->offset + part->size) - position;
    {
      // The copy outside the lock every read-ahead shares; the part stays alive with `part`.
      budget_->mu_.Unlock();
      std::memcpy(out.data() + (position - offset), part->bytes.data + (position - part->offset), n);
      budget_->mu_.Lock();
    }
    position += n;
  }
  while (!parts_.empty() && parts_.front()->offset + parts_.front()->size <= position) DropFront();
  return absl::OkStatus();
}

}  // namespace metaload
