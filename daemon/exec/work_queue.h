// Worker threads for everything a gRPC reaction must not do on its own thread: opening and
// reading files, parsing headers and skeletons, planning (docs/style.md habit 11, as gRPC's
// route_guide callback example never does I/O in a reaction). A handler posts a job and
// returns its reactor; the job finishes the RPC from a worker thread.
//
//   WorkQueue io("io", 8, 4096);
//   if (!io.Post([reactor, request] { reactor->Finish(Handle(*request)); })) {
//     reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "busy"));
//   }
//
// Thread-safety: Post may be called from any thread. The destructor runs every job already
// queued, then joins the workers.
#ifndef METALOAD_DAEMON_EXEC_WORK_QUEUE_H_
#define METALOAD_DAEMON_EXEC_WORK_QUEUE_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace metaload {

class WorkQueue {
 public:
  // REQUIRES: threads >= 1, max_queued >= 1.
  WorkQueue(std::string name, int threads, size_t max_queued);
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `job`; false (and `job` dropped unrun) when `max_queued` jobs already wait: the
  // caller answers RESOURCE_EXHAUSTED instead of letting a flood grow memory without bound.
  bool Post(std::function<void()> job);

  const std::string& name() const { return name_; }
  size_t queued() const;

 private:
  void Run();
  bool ReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  const size_t max_queued_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_EXEC_WORK_QUEUE_H_
