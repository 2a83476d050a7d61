// Answers from plans held never wait behind a build (issue 35): a plan for a huge world (2^20
// ranks took 56-71 s) held both planning threads, and cached plans waited 43 s behind it. Now a
// plan not held is built on a queue of its own, one at a time, and answers from held plans are
// given meanwhile.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/convert.h"
#include "proto/upload.h"
#include "tests/daemon/service/checkpoint_daemon.h"
#include "tests/daemon/service/in_process_daemon.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

grpc::Status AskPlan(v1::Metad::Stub& stub, int world_size, int rank, const std::string& strategy = "") {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(2));
  v1::GetPlanRequest request;
  request.set_model("m");
  request.set_world_size(world_size);
  request.set_rank(rank);
  request.set_strategy(strategy);
  v1::GetPlanResponse response;
  return stub.GetPlan(&ctx, request, &response);
}

TEST(PlanFairnessTest, AnswersFromAHeldPlanDoNotWaitBehindBuilds) {
  testing::TempDir dir;
  std::vector<std::string> names;
  for (int i = 0; i < 92; ++i) names.push_back(absl::StrCat("model.layers.", i, ".weight"));
  ASSERT_TRUE(testing::WriteTestCheckpoint(dir.File("m"), names, 64).ok());
  testing::InProcessDaemon daemon(absl::StrCat("node: a\ngpus: 1024\nroots: [", dir.path(), "]\n"));
  ASSERT_TRUE(daemon.Start().ok());
  const grpc::Status registered = daemon.Register("m", dir.File("m"));
  ASSERT_TRUE(registered.ok()) << registered.error_message();
  // 64 members of 1,024 GPUs: worlds of up to 65,536 ranks may be planned.
  ASSERT_TRUE(daemon.JoinFakeMembers("f", 63, 1024).ok());
  ASSERT_TRUE(AskPlan(daemon.stub(), 2, 0).ok());  // held from now on

  // Three builds of about 1.5 s each here, asked at once (three, so that a machine several times
  // faster still builds for over a second): before, two of them took both planning
  // threads and every other answer waited for one of them.
  const absl::Time start = absl::Now();
  std::vector<std::thread> builds;
  std::vector<grpc::Status> built(3);
  for (int b = 0; b < 3; ++b) {
    builds.emplace_back([&, b] { built[b] = AskPlan(daemon.stub(), 65536 - b, 0, "replicate"); });
  }
  absl::SleepFor(absl::Milliseconds(200));  // the builds have begun
  const absl::Time asked = absl::Now();
  const grpc::Status held = AskPlan(daemon.stub(), 2, 1);
  const absl::Duration answered_in = absl::Now() - asked;
  for (std::thread& t : builds) t.join();
  const absl::Duration builds_took = absl::Now() - start;
  ASSERT_TRUE(held.ok()) << held.error_message();
  for (const grpc::Status& status : built) EXPECT_TRUE(status.ok()) << status.error_message();
  std::printf("held plan answered in %s while three builds took %s\n",
              absl::FormatDuration(answered_in).c_str(), absl::FormatDuration(builds_took).c_str());
  ASSERT_GT(builds_took, absl::Seconds(1)) << "the builds must be slow enough to wait behind";
  EXPECT_LT(answered_in * 4, builds_took) << "the held plan's answer waited behind a build";
}

}  // namespace
}  // namespace metaload
