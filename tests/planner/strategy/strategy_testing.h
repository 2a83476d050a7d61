// Helpers for tests that plan through the entry points users reach: the flags as `metactl plan`
// parses them, and MakePlan on a uniform cluster.
#ifndef METALOAD_TESTS_PLANNER_STRATEGY_STRATEGY_TESTING_H_
#define METALOAD_TESTS_PLANNER_STRATEGY_STRATEGY_TESTING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/strategy/strategy.h"
#include "planner/strategy/strategy_flags.h"
#include "util/error_kind.h"

namespace metaload::testing {

// Parses `flags` as `metactl plan MODEL <flags>` would; `help`, when given, gets its --help.
inline absl::StatusOr<StrategyOptions> ParsePlanFlags(std::vector<std::string> flags,
                                                      std::string* help = nullptr) {
  CliArgs args("metactl plan", "MODEL", "test");
  AddStrategyFlags(&args);
  if (help != nullptr) *help = args.Help();
  std::vector<std::string> words = {"metactl", "plan"};
  words.insert(words.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  absl::Status parsed = args.Parse(static_cast<int>(argv.size()), argv.data(), 2);
  if (!parsed.ok()) return parsed;
  return ParseStrategyFlags(args);
}

// MakePlan of `skeleton` with `strategy` (and --tp `tp`) on `gpus` GPUs of `gpu_memory_bytes`,
// in nodes of 8.
inline absl::StatusOr<Plan> PlanOnGpus(const Skeleton& skeleton, const std::string& strategy, int gpus,
                                       uint64_t gpu_memory_bytes = 1ull << 30, int tp = 1) {
  absl::StatusOr<Cluster> cluster = MakeUniformCluster(gpus, 0, gpu_memory_bytes);
  if (!cluster.ok()) return cluster.status();
  PlanRequest request;
  request.skeleton = &skeleton;
  request.cluster = &*cluster;
  request.options.strategy = strategy;
  request.options.tp = tp;
  return MakePlan(request);
}

// The item of `rank` that reads `tensor`; null when it reads none.
inline const ReadItem* FindItem(const RankPlan& rank, const std::string& tensor) {
  for (const ReadItem& item : rank.items) {
    if (item.tensor == tensor) return &item;
  }
  return nullptr;
}

// `plan` is a refusal with `code` and `kind` whose message contains `substring`. Every refusal
// of the planner but "would stay on meta" is the request to fix (exit 2), "does not fit"
// included: ResourceExhausted alone would say "busy, try again", which would never help.
inline void ExpectError(const absl::StatusOr<Plan>& plan, absl::StatusCode code, const std::string& substring,
                        ErrorKind kind = ErrorKind::kBadInput) {
  ASSERT_FALSE(plan.ok()) << "expected an error containing: " << substring;
  EXPECT_EQ(plan.status().code(), code) << plan.status();
  EXPECT_THAT(std::string(plan.status().message()), ::testing::HasSubstr(substring));
  EXPECT_EQ(KindOf(plan.status()), kind) << plan.status();
}

}  // namespace metaload::testing

#endif  // METALOAD_TESTS_PLANNER_STRATEGY_STRATEGY_TESTING_H_
