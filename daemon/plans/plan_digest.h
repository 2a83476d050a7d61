// What makes two plans the same: the keys a plan is cached under (plan_cache.h) and the digest
// every rank of a job compares (GetPlanResponse.plan_digest), so that ranks that were answered
// from different plans find out before they load.
//
//   std::string digest = PlanDigest(plan, options);
//
// Pure functions; safe from any thread.
#ifndef METALOAD_DAEMON_PLANS_PLAN_DIGEST_H_
#define METALOAD_DAEMON_PLANS_PLAN_DIGEST_H_

#include <string>
#include <vector>

#include "planner/plan/cluster.h"
#include "planner/plan/plan.h"
#include "planner/strategy/strategy.h"

namespace metaload {

// Everything about `options` that a plan depends on.
std::string OptionsKey(const StrategyOptions& options);
// Everything about the members planned on that a plan depends on.
std::string MembersKey(const std::vector<NodeSpec>& members);

// SHA-256 (hex) of everything that makes two plans the same for the ranks executing them.
// (Fed from the compact form item by item, as the expanded plan would read.)
std::string PlanDigest(const CompactPlan& plan, const StrategyOptions& options);

}  // namespace metaload

#endif  // METALOAD_DAEMON_PLANS_PLAN_DIGEST_H_
