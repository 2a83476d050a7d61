// The `replicate` strategy: every rank holds every tensor whole (data-parallel replicas of one
// rank each). When that does not fit, it offers whole-model tp groups and fsdp.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "planner/strategy/fit.h"
#include "planner/strategy/plan_table.h"
#include "planner/strategy/strategies/strategy_table.h"
#include "planner/strategy/strategies/tp.h"

namespace metaload {
namespace {

absl::Status PlanReplicate(const PlanRequest& request, const PlanSetup& setup, CompactPlan* plan,
                           NoFit* no_fit) {
  plan->replicas = setup.world_size;
  for (CompactRank& rank : plan->ranks) {
    for (size_t i = 0; i < plan->items.size(); ++i) plan->Add(rank, i);
  }
  return CheckBudgets(*plan, setup.budgets, "replicate holds the whole model on every GPU", /*gpus_needed=*/0,
                      no_fit);
}

// A replica too large for a GPU: the same replicas as tp groups (--pp 1; more GPUs would only
// make more replicas), or the model spread over every GPU.
void ReplicateWouldFit(const PlanRequest& request, const NoFit& no_fit, std::vector<std::string>* fits) {
  TpRetry retry;
  retry.pp = TpRetry::Pp::kOne;
  retry.offer_more_gpus = false;
  if (std::optional<std::string> tp = SmallestTpThatFits(request, retry, no_fit.gpus_needed > 0)) {
    fits->push_back(*std::move(tp));
  }
  if (PlanWithoutAdvice(kFsdpStrategy, request, nullptr).ok()) {
    fits->push_back(absl::StrCat("--strategy ", kFsdpStrategy.name));
  }
}

// "all 291 tensors".
std::string ReplicateHolds(const Plan& plan, const RankPlan& rank, size_t sliced, size_t whole) {
  return absl::StrCat(sliced == 0 ? "all " : "", DefaultHolds(sliced, whole));
}

}  // namespace

const Strategy kReplicateStrategy = [] {
  Strategy s("replicate", "every rank holds everything", &PlanReplicate);
  s.would_fit = &ReplicateWouldFit;
  s.holds = &ReplicateHolds;
  s.not_a_device_map = "puts every tensor on every rank";
  return s;
}();

}  // namespace metaload
