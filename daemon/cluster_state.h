// The coordinator's state: cluster membership and registered models, and the plans made
// from them. Pure data plus the planner; no I/O.
//
// Thread-safety: all methods may be called concurrently (one mutex; planning happens
// outside it so a slow plan never blocks Join or ReadRange bookkeeping).
#ifndef METALOAD_DAEMON_CLUSTER_STATE_H_
#define METALOAD_DAEMON_CLUSTER_STATE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "planner/checkpoint.h"
#include "planner/skeleton.h"
#include "planner/strategy.h"
#include "proto/metaload.grpc.pb.h"

namespace metaload {

class ClusterState {
 public:
  // Adds or refreshes a member (by name). InvalidArgument if another member already uses
  // the name with a different address (two hosts configured with the same `node`).
  absl::Status Join(const v1::NodeInfo& node);
  std::vector<v1::NodeInfo> Members() const;  // sorted by name

  // Adds or replaces a model. Parses its skeleton once here (InvalidArgument if bad).
  absl::Status PutModel(const v1::ModelRecord& record);
  std::vector<v1::ModelRecord> Models() const;  // sorted by name

  // Plans `model` for `world_size` ranks on the current members (0: every GPU) and says
  // which members can serve each file. NotFound for an unknown model; InvalidArgument
  // when the world is larger than the cluster's GPUs.
  absl::StatusOr<v1::GetPlanResponse> MakePlan(const std::string& model, int world_size,
                                               const StrategyOptions& options) const;

 private:
  struct Model {
    v1::ModelRecord record;
    Skeleton skeleton;
    Checkpoint checkpoint;
  };

  mutable absl::Mutex mu_;
  std::map<std::string, v1::NodeInfo> members_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<const Model>> models_ ABSL_GUARDED_BY(mu_);
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_CLUSTER_STATE_H_
