// Plans computed once per (model version, options, world size, live members) and kept in a
// small cache, so that the ranks of one job, asking one by one, are answered from the same
// plan. The cache is bounded in plans and in bytes (HeldBytes): a token holder joining 256
// fake members and asking for 8 world sizes made 8 plans of ~290 MiB each (issue 23). The first caller of a
// key computes it (PlanModel, outside the cache's mutex); callers of the same key meanwhile wait for that one
// computation instead of planning again.
//
//   PlanCache plans(PlanCache::Options{});
//   ML_ASSIGN_OR_RETURN(std::shared_ptr<const PlannedModel> planned,
//                       plans.Get(model, members.Live(), world_size, options));
//
// Thread-safety: every method may be called concurrently. Get blocks while the plan of its
// key is computed: call it from a work queue.
#ifndef METALOAD_DAEMON_PLANS_PLAN_CACHE_H_
#define METALOAD_DAEMON_PLANS_PLAN_CACHE_H_

#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/plans/planned_model.h"

namespace metaload {

class PlanCache {
 public:
  struct Options {
    int cached_plans = 8;  // the least recently used beyond this are forgotten
    // The least recently used beyond this many bytes together are forgotten too, counting a
    // plan in construction by its PlanBytesBound; the plan asked for last is kept (its ranks are
    // being answered from it). A plan whose bound is over this is refused before it is built.
    uint64_t max_bytes = 1ull << 30;
  };

  explicit PlanCache(Options options);

  // The plan of `model` for `world_size` ranks on `members` (PlanModel), computed once per key.
  // ResourceExhausted, of kind bad input, naming the bound and max_bytes, when its
  // PlanBytesBound is over max_bytes: nothing is built.
  absl::StatusOr<std::shared_ptr<const PlannedModel>> Get(std::shared_ptr<const RegisteredModel> model,
                                                          std::vector<NodeSpec> members, int world_size,
                                                          const StrategyOptions& options);

  // The finished plan of that key when it is held, without waiting or computing; else null.
  // What answers are given from on the planning queue, so that they never wait behind a build
  // (issue 35: cached plans waited 43 s behind the plan of a world of 2^20 ranks).
  std::shared_ptr<const PlannedModel> Cached(const RegisteredModel& model,
                                             const std::vector<NodeSpec>& members, int world_size,
                                             const StrategyOptions& options);

  // The finished plans held now, and their HeldBytes together.
  size_t plans() const;
  uint64_t held_bytes() const;

 private:
  // One plan computation, shared by the callers that wait for it.
  struct Flight {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
    absl::StatusOr<std::shared_ptr<const PlannedModel>> result ABSL_GUARDED_BY(mu);
  };
  struct Entry {
    std::string key;
    std::shared_ptr<Flight> flight;
    uint64_t bytes = 0;  // HeldBytes once computed; PlanBytesBound while in construction
    bool done = false;
  };

  // ResourceExhausted (bad input: over a configured limit) for a plan whose bound is over max_bytes.
  absl::Status TooLarge(const RegisteredModel& model, const std::vector<NodeSpec>& members, int world_size,
                        uint64_t bound) const;
  static std::string Key(const RegisteredModel& model, const std::vector<NodeSpec>& members, int world_size,
                         const StrategyOptions& options);
  // The entry of `key`, made the most recently used; null when none.
  const Entry* UseLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the least recently used entries past the limits, never the first (newest).
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  // A Flight's mu is taken only after mu_ is released.
  mutable absl::Mutex mu_;
  // Most recently used first.
  std::list<Entry> plans_ ABSL_GUARDED_BY(mu_);
  uint64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_PLANS_PLAN_CACHE_H_
