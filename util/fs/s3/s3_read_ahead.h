// Parts of one object's span fetched ahead of a reader that goes through it in order: a
// daemon's ReadRange stream asks for 1 MiB chunks one after the other, which on a bucket would
// be one ranged GET per MiB, each waiting out the bucket's first-byte latency (~30 ms) behind
// the last. Told the span the stream will read (RandomAccessFile::WillNeed), this fetches it in
// parts of `part_bytes`, up to `window_parts` at once and ahead of the reader, and answers the
// reader's chunks from them: the bucket sees GETs of whole parts, several in flight.
//
//   ReadAheadBudget budget(256 << 20);
//   S3ReadAhead ahead(begin, end, 8 << 20, 8, &budget, fetch);   // fetch(offset, out, cancelled)
//   std::optional<absl::Status> read = ahead.Read(offset, chunk);  // nullopt: not in its span
//
// Memory is bounded twice: a part beyond the one the reader waits for is fetched only while the
// process-wide budget has room for it (every S3ReadAhead of the process shares one), and a part
// is freed as soon as the reader has read past it. The part the reader waits for is fetched
// regardless of the budget, so that a reader never waits on parts other readers hold (which
// could be held by readers waiting for the same thread pool): memory is at most the budget plus
// one part per waiting reader.
//
// A read before the oldest part kept (read again) or past the span is not answered (nullopt):
// the caller reads it itself. A read that skips ahead drops what lies before it.
//
// Stop, and destruction, cancel the fetches in flight (`cancelled` is set; the fetch is to give up, as
// S3Client::GetRange does within a second) and waits for them.
//
// Thread-safety: Read may be called from several threads at once.
#ifndef METALOAD_UTIL_FS_S3_S3_READ_AHEAD_H_
#define METALOAD_UTIL_FS_S3_S3_READ_AHEAD_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace metaload {

// Bytes all read-aheads of a process may hold ahead of their readers. Its mutex is every
// S3ReadAhead's: a part freed by one wakes the fetchers of another.
class ReadAheadBudget {
 public:
  explicit ReadAheadBudget(uint64_t limit_bytes) : limit_bytes_(limit_bytes) {}
  uint64_t limit_bytes() const { return limit_bytes_; }
  uint64_t used_bytes() const {
    absl::MutexLock lock(&mu_);
    return used_bytes_;
  }
  // The most it held at once since made (for tests).
  uint64_t peak_bytes() const {
    absl::MutexLock lock(&mu_);
    return peak_bytes_;
  }

 private:
  friend class S3ReadAhead;
  const uint64_t limit_bytes_;
  mutable absl::Mutex mu_;
  uint64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // parts fetched or fetching, budgeted or not
  uint64_t peak_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

class S3ReadAhead {
 public:
  // Fills `out` with bytes [offset, offset + out.size()) of the object; gives up (any error)
  // soon after `*cancelled` becomes true.
  using Fetch = std::function<absl::Status(uint64_t offset, absl::Span<uint8_t> out,
                                           const std::atomic<bool>* cancelled)>;

  // The span [begin, end); part_bytes and window_parts at least 1 (smaller values are taken as 1).
  S3ReadAhead(uint64_t begin, uint64_t end, uint64_t part_bytes, int window_parts, ReadAheadBudget* budget,
              Fetch fetch);
  ~S3ReadAhead();
  S3ReadAhead(const S3ReadAhead&) = delete;
  S3ReadAhead& operator=(const S3ReadAhead&) = delete;

  // Bytes [offset, offset + out.size()) from the parts, waiting for them: the fetch's error
  // where one failed; nullopt where the range is not the read-ahead's to answer (above).
  std::optional<absl::Status> Read(uint64_t offset, absl::Span<uint8_t> out);

  // Cancels the fetches in flight and ends every read waiting or to come: Cancelled. From any
  // thread (a stream's cancellation), at once.
  void Stop();

  // Parts fetched so far (each one Fetch call), for tests.
  uint64_t fetches() const;

 private:
  // A part's bytes are written by its fetcher alone until `done`, then only read; the rest is
  // under budget_->mu_. A part dropped while in flight lives on with its fetcher, which gives
  // its bytes back to the budget when it finishes.
  // Mapped for the part alone and unmapped as it goes: from malloc, parts freed by one fetcher
  // thread stay in that thread's arena (glibc raises its mmap threshold past the part size after
  // the first free), and the daemon's resident memory would keep every arena's worth.
  struct Mapping {
    uint8_t* data = nullptr;
    size_t size = 0;
    ~Mapping();
  };
  struct Part {
    uint64_t offset = 0, size = 0;
    Mapping bytes;
    bool done = false, dropped = false;
    absl::Status status;
  };

  void Work();
  // Whether a fetcher may start the next part now.
  bool CanStart() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(budget_->mu_);
  // Drops the oldest part kept.
  void DropFront() ABSL_EXCLUSIVE_LOCKS_REQUIRED(budget_->mu_);

  const uint64_t begin_, end_, part_bytes_;
  const size_t window_parts_;
  ReadAheadBudget* const budget_;
  const Fetch fetch_;
  std::atomic<bool> cancelled_{false};
  std::vector<std::thread> fetchers_;
  // Under budget_->mu_: the parts started and not yet read past, oldest first, and where the
  // next starts.
  std::deque<std::shared_ptr<Part>> parts_ ABSL_GUARDED_BY(budget_->mu_);
  uint64_t next_offset_ ABSL_GUARDED_BY(budget_->mu_) = 0;
  // The first byte a reader waits for that no part holds (then always next_offset_).
  uint64_t wanted_offset_ ABSL_GUARDED_BY(budget_->mu_) = UINT64_MAX;
  bool stopping_ ABSL_GUARDED_BY(budget_->mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(budget_->mu_);  // a fetch's error: nothing more is started
  uint64_t fetches_ ABSL_GUARDED_BY(budget_->mu_) = 0;
};

}  // namespace metaload

#endif  // METALOAD_UTIL_FS_S3_S3_READ_AHEAD_H_
