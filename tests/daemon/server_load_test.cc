// Issue 12: a daemon's load (ReadRange streams in flight) reaches the coordinator, its own
// from its service and a member's in its Join, and orders each file's servers for a rank:
// its own node first, then the least loaded. A real coordinator process, a stream held open
// by a reader that stops reading, and members joined by hand.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/metaload.grpc.pb.h"
#include "proto/upload.h"
#include "tests/daemon/metad_process.h"
#include "tests/daemon/model_records.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

using ::metaload::testing::MetadProcess;
using ::metaload::testing::TempDir;
using ::metaload::testing::WriteFileOrDie;

class ServerLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::mkdir(dir_.File("root").c_str(), 0755);
    WriteFileOrDie(dir_.File("root/model.safetensors"),
                   testing::OneTensorHeader(4096, 8192) + std::string(64 << 20, 'x'));
    WriteFileOrDie(dir_.File("node.yaml"),
                   absl::StrCat("node: a\nlisten: 127.0.0.1:0\ngpus: 1\nroots: [", dir_.File("root"), "]\n"));
    process_ =
        std::make_unique<MetadProcess>(dir_.File("node.yaml"), std::vector<std::string>{}, dir_.File("log"));
    ASSERT_FALSE(process_->address().empty());
    stub_ = v1::Metad::NewStub(grpc::CreateChannel(process_->address(), grpc::InsecureChannelCredentials()));
  }

  grpc::Status Join(const std::string& name, uint32_t read_streams) {
    grpc::ClientContext ctx;
    v1::JoinRequest request;
    request.mutable_node()->set_name(name);
    request.mutable_node()->set_address(absl::StrCat("127.0.0.1:", 9 + name[0]));
    request.mutable_node()->set_gpu_count(1);
    request.mutable_node()->set_gpu_memory_bytes(1ull << 30);
    request.mutable_node()->add_roots(dir_.File("root"));
    request.set_read_streams(read_streams);
    v1::JoinResponse response;
    return stub_->Join(&ctx, request, &response);
  }

  grpc::Status Publish() {
    v1::PublishModelRequest request;
    // The whole file after its header (64 MiB of BF16 [4096, 8192]): what a stream may read.
    *request.mutable_model() = testing::OneTensorModel(dir_.File("root"), 4096, 8192);
    grpc::ClientContext ctx;
    v1::PublishModelResponse response;
    return PublishModel(*stub_, &ctx, request, &response);
  }

  // The servers of the model's file, in the order the rank on `node` is told to try them.
  std::vector<std::string> ServersFor(const std::string& node) {
    v1::GetPlanRequest request;
    request.set_model("m");
    request.set_world_size(3);
    request.set_strategy("replicate");  // every rank reads the file
    std::vector<std::string> order;
    for (int rank = 0; rank < 3; ++rank) {
      request.set_rank(rank);
      grpc::ClientContext ctx;
      v1::GetPlanResponse response;
      grpc::Status s = stub_->GetPlan(&ctx, request, &response);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (!s.ok() || response.plan().ranks(0).node() != node) continue;
      for (const v1::Endpoint& e : response.files(0).servers()) order.push_back(e.node());
    }
    return order;
  }

  TempDir dir_;
  std::unique_ptr<MetadProcess> process_;
  std::unique_ptr<v1::Metad::Stub> stub_;
};

TEST_F(ServerLoadTest, AFilesOtherServersAreOrderedByTheirLoad) {
  ASSERT_TRUE(Join("b", 0).ok());
  ASSERT_TRUE(Join("c", 5).ok());
  ASSERT_TRUE(Publish().ok());
  using V = std::vector<std::string>;
  EXPECT_EQ(ServersFor("b"), (V{"b", "a", "c"})) << "a serves nothing: 0 streams, c 5";

  // A stream the coordinator serves, held open: its reader stops after one chunk, so the
  // daemon's writes wait on flow control and the stream stays in flight.
  grpc::ClientContext held;
  v1::ReadRangeRequest request;
  request.set_model("m");
  request.set_path(dir_.File("root/model.safetensors"));
  request.set_offset(testing::kOneTensorDataBegin);
  request.set_length(64 << 20);
  auto reader = stub_->ReadRange(&held, request);
  v1::ReadRangeChunk chunk;
  ASSERT_TRUE(reader->Read(&chunk));
  ASSERT_TRUE(Join("b", 0).ok());
  ASSERT_TRUE(Join("c", 0).ok());
  EXPECT_EQ(ServersFor("b"), (V{"b", "c", "a"})) << "a serves one stream now";
  EXPECT_EQ(ServersFor("c"), (V{"c", "b", "a"}));
  held.TryCancel();
  while (reader->Read(&chunk)) {
  }
  reader->Finish();
  // Once the stream is gone, a and c tie again: the rank rotation decides (rank 1 on b: c, a).
  for (int i = 0; i < 50 && ServersFor("c") != V{"c", "a", "b"}; ++i) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(ServersFor("c"), (V{"c", "a", "b"}));
}

}  // namespace
}  // namespace metaload
