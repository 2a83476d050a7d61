// One plan of a registered model on the members that were live when it was asked for, with
// everything needed to answer any of its ranks (proto/plan_answers.h: the pieces serialized
// once). Made by PlanModel, kept by the plan cache (plan_cache.h).
//
//   ML_ASSIGN_OR_RETURN(std::shared_ptr<const PlannedModel> planned,
//                       PlanModel(model, members, world_size, options));
//
// Immutable once made; safe to share between threads.
#ifndef METALOAD_DAEMON_PLANS_PLANNED_MODEL_H_
#define METALOAD_DAEMON_PLANS_PLANNED_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/plans/plan_fanout.h"
#include "daemon/registry/model_registry.h"
#include "planner/plan/cluster.h"
#include "planner/plan/plan.h"
#include "planner/strategy/strategy.h"
#include "proto/plan_answers.h"

namespace metaload {

struct PlannedModel {
  std::shared_ptr<const RegisteredModel> model;
  StrategyOptions options;
  CompactPlan plan;               // memory-lean: ranks are answered from it one by one
  std::string digest;             // PlanDigest(plan, options)
  std::vector<NodeSpec> members;  // the live members it was planned on
  PlanTables tables;              // computed once with the plan (proto/plan_answers.h)
  // Its read-once fan-out, assigned on the first rank's ask (plan_fanout.h); never null.
  std::shared_ptr<PlanFanout> fanout = std::make_shared<PlanFanout>();
};

// The GPU slots of `members` (their `gpus:`), saturating at UINT64_MAX.
uint64_t GpuSlots(const std::vector<NodeSpec>& members);
// The ranks a plan for `world_size` has: itself, or for 0 every GPU slot of `members`, at most
// kMaxWorldSize (a larger count is refused by PlanModel).
uint64_t ResolvedWorldSize(const std::vector<NodeSpec>& members, int world_size);

// The plan of `model` for `world_size` ranks (0: every GPU slot of `members`, at most
// kMaxWorldSize) on `members`. InvalidArgument for a world larger than the members' GPU slots;
// the planner's errors otherwise. CPU work: call it from a work queue.
absl::StatusOr<std::shared_ptr<const PlannedModel>> PlanModel(std::shared_ptr<const RegisteredModel> model,
                                                              std::vector<NodeSpec> members, int world_size,
                                                              const StrategyOptions& options);

// About how much memory `planned` holds beyond the model it plans (its items, ranks, members
// and serialized tables: strings and vectors by their capacity; its fan-out by the most an
// assignment can hold, FanoutBoundBytes, whether or not assigned yet): what the plan cache counts.
uint64_t HeldBytes(const PlannedModel& planned);

// An upper bound of HeldBytes for the plan PlanModel would make of `model` for `world_size`
// ranks (0: every GPU slot of `members`) on `members`, whatever the strategy: every rank refers
// to every tensor once and lists every module. Computed from sizes alone, in microseconds, so
// that a plan too large to hold is refused before it is built (issue 35: a world of 2^20 ranks
// on a 23-tensor model took 56-71 s and 2.46 GiB to plan). Saturates at UINT64_MAX.
uint64_t PlanBytesBound(const RegisteredModel& model, const std::vector<NodeSpec>& members, int world_size);

// Every file of `record`, in its checkpoint's order, with the members whose roots hold it.
std::vector<PlanFile> PlanFilesOf(const ModelRecord& record, const std::vector<NodeSpec>& members);

}  // namespace metaload

#endif  // METALOAD_DAEMON_PLANS_PLANNED_MODEL_H_
