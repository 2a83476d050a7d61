// Limits that hold (issue 23), on a real MetadService in this process:
// - slow registrations never starve reads: 4 registrations hashing a checkpoint on a slow disk
//   held all 4 io threads, and a ReadRange of another model got DEADLINE_EXCEEDED and was still
//   unanswered 400 s later. Registration headers, digests and reads run on queues of their own;
//   the disk is slowed by a FaultFileSystem.
// - the plan cache is bounded in bytes: a token holder's fake members and 8 world sizes made 8
//   plans of ~290 MiB each.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <thread>

#include "absl/synchronization/notification.h"
#include "proto/upload.h"
#include "tests/daemon/service/checkpoint_daemon.h"
#include "tests/daemon/service/in_process_daemon.h"
#include "tests/faults/fault_file_system.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

// A RegisterModel upload in flight; `answered` once its status came.
struct PendingRegistration {
  grpc::ClientContext ctx;
  v1::RegisterModelRequest request;
  v1::RegisterModelResponse response;
  grpc::Status status;
  absl::Notification answered;
};

TEST(Queues, RegistrationsHashingASlowDiskLeaveReadsOfOtherModelsAnswered) {
  testing::TempDir dir;
  ASSERT_TRUE(testing::WriteTestCheckpoint(dir.File("fast"), {"w"}, 4096).ok());
  ASSERT_TRUE(testing::WriteTestCheckpoint(dir.File("slow"), {"w"}, 4096).ok());
  FaultFileSystem disk;
  disk.Add({.kind = FileFault::kSlow, .path_suffix = "slow/model.safetensors", .delay = absl::Seconds(4)});
  ServiceSeams seams;
  seams.file_system = &disk;
  testing::InProcessDaemon daemon(absl::StrCat("node: a\ngpus: 1\nroots: [", dir.path(), "]\n"), seams);
  ASSERT_TRUE(daemon.Start().ok());
  ASSERT_TRUE(daemon.Register("fast", dir.File("fast")).ok());
  grpc::ClientContext layout_ctx;
  v1::GetLayoutRequest layout_request;
  layout_request.set_model("fast");
  v1::GetLayoutResponse layout;
  ASSERT_TRUE(daemon.stub().GetLayout(&layout_ctx, layout_request, &layout).ok());
  ASSERT_EQ(layout.tensors_size(), 1);

  // More slow hashing registrations than the io queue has threads (4 on this machine).
  std::vector<std::unique_ptr<PendingRegistration>> pending;
  for (int i = 0; i < 6; ++i) {
    auto p = std::make_unique<PendingRegistration>();
    p->request.set_name(absl::StrCat("slow-", i));
    p->request.set_checkpoint_dir(dir.File("slow"));
    p->request.set_digest(true);
    p->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    PendingRegistration* r = p.get();
    StartUpload(
        UploadChunks(r->request),
        [&daemon, r](grpc::ClientWriteReactor<v1::UploadChunk>* upload) {
          daemon.stub().async()->RegisterModel(&r->ctx, &r->response, upload);
        },
        [r](const grpc::Status& status) {
          r->status = status;
          r->answered.Notify();
        });
    pending.push_back(std::move(p));
  }
  absl::SleepFor(absl::Milliseconds(500));  // every one is hashing now

  grpc::ClientContext read_ctx;
  read_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  v1::ReadRangeRequest read;
  read.set_model("fast");
  read.set_path(dir.File("fast/model.safetensors"));
  read.set_offset(layout.tensors(0).begin_offset());
  read.set_length(layout.tensors(0).end_offset() - layout.tensors(0).begin_offset());
  auto reader = daemon.stub().ReadRange(&read_ctx, read);
  v1::ReadRangeChunk chunk;
  uint64_t bytes = 0;
  while (reader->Read(&chunk)) bytes += chunk.data().size();
  const grpc::Status read_status = reader->Finish();
  EXPECT_TRUE(read_status.ok()) << read_status.error_code() << ": " << read_status.error_message();
  EXPECT_EQ(bytes, 4096u);

  for (const std::unique_ptr<PendingRegistration>& p : pending) {
    p->answered.WaitForNotification();
    EXPECT_TRUE(p->status.ok()) << p->request.name() << ": " << p->status.error_message();
  }
}

// One model of `tensors` BF16 [64, 64] tensors in model.safetensors (the plan's size grows with
// tensors x ranks; no byte is read).
v1::ModelRecord ManyTensors(const std::string& dir, int tensors) {
  v1::ModelRecord r;
  r.set_name("big");
  r.set_checkpoint_dir(dir);
  r.set_registered_on("a");
  std::string skeleton = R"({"format": "metaload.skeleton/1", "tensors": [)";
  for (int i = 0; i < tensors; ++i) {
    absl::StrAppend(&skeleton, i ? ", " : "", R"({"name": "layers.)", i,
                    R"(.w", "shape": [64, 64], "dtype": "BF16"})");
    v1::TensorLocation* t = r.add_tensors();
    t->set_name(absl::StrCat("layers.", i, ".w"));
    t->set_dtype("BF16");
    t->add_shape(64);
    t->add_shape(64);
    t->set_file("model.safetensors");
    t->set_begin_offset(8 + 8192ull * i);
    t->set_end_offset(8 + 8192ull * (i + 1));
  }
  r.set_skeleton_json(skeleton + "]}");
  return r;
}

TEST(PlanCacheLimit, PlansForManyWorldSizesStayWithinPlanCacheSize) {
  testing::TempDir dir;
  testing::InProcessDaemon daemon(
      absl::StrCat("node: a\ngpus: 8\nroots: [", dir.path(), "]\nplan_cache_size: 16MiB\n"));
  ASSERT_TRUE(daemon.Start().ok());
  {
    grpc::ClientContext ctx;
    v1::PublishModelRequest request;
    *request.mutable_model() = ManyTensors(dir.path(), 400);
    v1::PublishModelResponse response;
    const grpc::Status published = PublishModel(daemon.stub(), &ctx, request, &response);
    ASSERT_TRUE(published.ok()) << published.error_message();
  }
  // Fake members: 64 nodes of 8 GPUs, joined as any member may.
  ASSERT_TRUE(daemon.JoinFakeMembers("fake-", 64, 8).ok());
  uint64_t largest_plan = 0;
  for (int world = 500; world < 508; ++world) {
    grpc::ClientContext ctx;
    v1::GetPlanRequest request;
    request.set_model("big");
    request.set_world_size(world);
    request.set_strategy("fsdp");
    request.set_rank(0);
    v1::GetPlanResponse plan;
    const grpc::Status planned = daemon.stub().GetPlan(&ctx, request, &plan);
    ASSERT_TRUE(planned.ok()) << world << ": " << planned.error_message();
    grpc::ClientContext status_ctx;
    v1::GetStatusResponse status;
    ASSERT_TRUE(daemon.stub().GetStatus(&status_ctx, v1::GetStatusRequest{}, &status).ok());
    if (status.plans_cached() == 1) largest_plan = std::max(largest_plan, status.plan_cache_bytes());
    EXPECT_LE(status.plan_cache_bytes(), std::max<uint64_t>(16ull << 20, largest_plan)) << world;
  }
  grpc::ClientContext status_ctx;
  v1::GetStatusResponse status;
  ASSERT_TRUE(daemon.stub().GetStatus(&status_ctx, v1::GetStatusRequest{}, &status).ok());
  EXPECT_GT(largest_plan, 4ull << 20) << "each plan is megabytes: 8 of them would not fit";
  EXPECT_LT(status.plans_cached(), 8u);
  EXPECT_LE(status.plan_cache_bytes(), 16ull << 20);
  std::cout << "plan cache: " << status.plans_cached() << " plans, " << status.plan_cache_bytes()
            << " bytes held of 16 MiB; one plan " << largest_plan << " bytes\n";
}

}  // namespace
}  // namespace metaload
