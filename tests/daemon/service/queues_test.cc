// Slow registrations never starve reads (issue 23): 4 registrations hashing a checkpoint on a
// slow disk held all 4 io threads, and a ReadRange of another model got DEADLINE_EXCEEDED and
// was still unanswered 400 s later. Registration headers, digests and reads now run on queues
// of their own. A real MetadService in this process, its disk slowed by a FaultFileSystem.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <thread>

#include "tests/daemon/service/checkpoint_daemon.h"
#include "tests/daemon/service/in_process_daemon.h"
#include "tests/faults/fault_file_system.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

// RegisterModel of `dir` as `name`, started now; Finish waits for its answer.
struct PendingRegistration {
  grpc::ClientContext ctx;
  v1::RegisterModelRequest request;
  v1::RegisterModelResponse response;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::RegisterModelResponse>> call;
  grpc::Status status;
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
  {
    grpc::ClientContext ctx;
    v1::RegisterModelRequest request;
    request.set_name("fast");
    request.set_checkpoint_dir(dir.File("fast"));
    v1::RegisterModelResponse response;
    ASSERT_TRUE(daemon.stub().RegisterModel(&ctx, request, &response).ok());
  }
  grpc::ClientContext layout_ctx;
  v1::GetLayoutRequest layout_request;
  layout_request.set_model("fast");
  v1::GetLayoutResponse layout;
  ASSERT_TRUE(daemon.stub().GetLayout(&layout_ctx, layout_request, &layout).ok());
  ASSERT_EQ(layout.tensors_size(), 1);

  // More slow hashing registrations than the io queue has threads (4 on this machine).
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<PendingRegistration>> pending;
  for (int i = 0; i < 6; ++i) {
    auto p = std::make_unique<PendingRegistration>();
    p->request.set_name(absl::StrCat("slow-", i));
    p->request.set_checkpoint_dir(dir.File("slow"));
    p->request.set_digest(true);
    p->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    p->call = daemon.stub().AsyncRegisterModel(&p->ctx, p->request, &cq);
    p->call->Finish(&p->response, &p->status, p.get());
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

  for (size_t done = 0; done < pending.size(); ++done) {
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(cq.Next(&tag, &ok));
    auto* p = static_cast<PendingRegistration*>(tag);
    EXPECT_TRUE(p->status.ok()) << p->request.name() << ": " << p->status.error_message();
  }
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace metaload
