// Bounds how many answers of one kind a daemon holds at once. The 1,024 ranks of a job ask
// for their part of a plan at the same moment; answered as fast as the work queue builds them,
// every answer would be built before the first left (162 KiB each for a 405B model at fsdp:
// 166 MB). Here a job starts only when fewer than `limit` earlier answers are still being
// built or sent; the others wait their turn in order.
//
//   AnswerLimit limit(32, &planning_queue, 4096);
//   call->WhenDone([&limit] { limit.Release(); });   // once the answer is sent
//   limit.Submit([call] { ...; call->Finish(status); },
//                [call](const absl::Status& refused) { call->Finish(refused); });
//
// Thread-safety: all methods may be called from any thread.
#ifndef METALOAD_DAEMON_EXEC_ANSWER_LIMIT_H_
#define METALOAD_DAEMON_EXEC_ANSWER_LIMIT_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/exec/work_queue.h"

namespace metaload {

class AnswerLimit {
 public:
  // `queue` must outlive this.
  AnswerLimit(size_t limit, WorkQueue* queue, size_t max_waiting);

  // Answers a call that was refused a slot or a place in the queue: RESOURCE_EXHAUSTED, try
  // again.
  using Refuse = std::function<void(const absl::Status&)>;

  // Runs `job` on the queue now, or once a slot frees. When neither can be (too many waiting,
  // or the queue full) calls `refuse` instead. Either way the call must give its slot back
  // with Release() exactly once, when its answer is done (sent, failed or cancelled).
  void Submit(std::function<void()> job, Refuse refuse);
  void Release();

 private:
  void Run(std::function<void()> job, const Refuse& refuse);

  const size_t limit_;
  WorkQueue* const queue_;
  const size_t max_waiting_;
  absl::Mutex mu_;
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<std::pair<std::function<void()>, Refuse>> waiting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_EXEC_ANSWER_LIMIT_H_
