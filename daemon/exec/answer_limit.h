// Bounds how many answers of one kind a daemon holds at once. The 1,024 ranks of a job ask
// for their part of a plan at the same moment; answered as fast as the work queue builds them,
// every answer would be built before the first left (162 KiB each for a 405B model at fsdp:
// 166 MB). Here a job starts only when fewer than `limit` earlier answers are still being
// built or sent; the others wait their turn in order.
//
//   AnswerLimit limit(32, &planning_queue, 4096);
//   auto* reactor = new LimitedReactor(&limit);   // releases its slot in OnDone
//   limit.Submit([reactor] { ...; reactor->Finish(status); }, reactor);
//
// Thread-safety: all methods may be called from any thread.
#ifndef METALOAD_DAEMON_EXEC_ANSWER_LIMIT_H_
#define METALOAD_DAEMON_EXEC_ANSWER_LIMIT_H_

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <deque>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/exec/work_queue.h"

namespace metaload {

class AnswerLimit {
 public:
  // `queue` must outlive this.
  AnswerLimit(size_t limit, WorkQueue* queue, size_t max_waiting);

  // Runs `job` on the queue now, or once a slot frees. When neither can be (too many waiting,
  // or the queue full) finishes `reactor` with RESOURCE_EXHAUSTED instead. Either way the
  // reactor's OnDone must call Release() exactly once (LimitedReactor does).
  void Submit(std::function<void()> job, grpc::ServerUnaryReactor* reactor);
  void Release();

 private:
  void Run(std::function<void()> job, grpc::ServerUnaryReactor* reactor);

  const size_t limit_;
  WorkQueue* const queue_;
  const size_t max_waiting_;
  absl::Mutex mu_;
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<std::pair<std::function<void()>, grpc::ServerUnaryReactor*>> waiting_ ABSL_GUARDED_BY(mu_);
};

// A unary reactor that gives its AnswerLimit slot back when the answer is done (sent,
// failed or cancelled), then deletes itself.
class LimitedReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit LimitedReactor(AnswerLimit* limit) : limit_(limit) {}
  void OnDone() override {
    limit_->Release();
    delete this;
  }

 private:
  AnswerLimit* const limit_;
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_EXEC_ANSWER_LIMIT_H_
