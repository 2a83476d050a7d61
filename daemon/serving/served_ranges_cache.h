// What a node agent may serve of each model (served_ranges.h), learned from its coordinator:
// an agent holds no model records, so it asks (GetLayout) and keeps the answer a short while.
// An answer is used for `fresh_for`, then asked again; a read it refuses asks again at once
// (the model may have been registered, or re-registered, a moment ago), but at most once per
// `min_refetch` per model, so that refused requests cannot hammer the coordinator. One fetch
// per model at a time: concurrent readers wait for it. When the coordinator cannot be reached,
// the last answer had is kept (the model was registered when it was given). An answer fetched
// anew that says the same as the one held (ServedRanges::SameClaims) keeps the one held, and
// with it what was checked of the files (ServedRanges::CheckOpened).
//
//   ServedRangesCache cache(fetch_from_coordinator, {});
//   ML_ASSIGN_OR_RETURN(auto served, cache.Check("llama", path, runs));  // may block on the fetch
//   ... open the file ..., then ML_RETURN_IF_ERROR(served->CheckOpened(path, *file));
//
// Thread-safety: all methods may be called concurrently. Check blocks: call it from a worker
// thread, never a gRPC reaction.
#ifndef METALOAD_DAEMON_SERVING_SERVED_RANGES_CACHE_H_
#define METALOAD_DAEMON_SERVING_SERVED_RANGES_CACHE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/serving/served_ranges.h"

namespace metaload {

class ServedRangesCache {
 public:
  // The model's ranges as the coordinator knows them now; NotFound when it is not registered,
  // another error when the coordinator cannot say. Blocks.
  using Fetch = std::function<absl::StatusOr<ServedRanges>(const std::string& model)>;
  struct Options {
    absl::Duration fresh_for = absl::Seconds(2);
    absl::Duration min_refetch = absl::Seconds(1);
  };

  ServedRangesCache(
      Fetch fetch, Options options, std::function<absl::Time()> clock = [] { return absl::Now(); });

  // ServedRanges::Check against the model's ranges; the ranges that allowed the read when it
  // passed. PermissionDenied naming the path also for a model that is not registered; the
  // fetch's error when nothing was ever learned of the model.
  absl::StatusOr<std::shared_ptr<const ServedRanges>> Check(const std::string& model, const std::string& path,
                                                            const StridedRuns& runs);

  // Drops what is known of `model` (this daemon forwarded its registration or removal).
  void Forget(const std::string& model);

 private:
  struct Entry {
    absl::StatusOr<std::shared_ptr<const ServedRanges>> ranges = absl::NotFoundError("not fetched");
    bool fetched = false;
    absl::Time fetched_at = absl::InfinitePast();
    bool fetching = false;
  };

  // What is known of `model`, fetched first unless it is at most `max_age` old. `fetched_at`:
  // when that answer was had.
  absl::StatusOr<std::shared_ptr<const ServedRanges>> Get(const std::string& model, absl::Duration max_age,
                                                          absl::Time* fetched_at);

  const Fetch fetch_;
  const Options options_;
  const std::function<absl::Time()> clock_;
  absl::Mutex mu_;
  // Shared: a reader waiting for a fetch keeps its entry alive if the map lets go of it.
  std::map<std::string, std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVING_SERVED_RANGES_CACHE_H_
