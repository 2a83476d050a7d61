// One request must never take a daemon down (issue 9): real metad processes sent the worst
// values, a FIFO under a root, a flood of connections past the descriptor limit, a second
// daemon on a port in use, members that stop re-joining.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/metaload.grpc.pb.h"
#include "proto/upload.h"
#include "tests/daemon/metad_process.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

using ::metaload::testing::MetadProcess;
using ::metaload::testing::TempDir;
using ::metaload::testing::WriteFileOrDie;

std::unique_ptr<v1::Metad::Stub> StubFor(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  return v1::Metad::NewStub(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

// A daemon with a root folder and `extra` lines of node config.
struct Node {
  TempDir dir;
  std::unique_ptr<MetadProcess> process;
  std::unique_ptr<v1::Metad::Stub> stub;

  explicit Node(const std::string& name = "a", const std::string& extra = "",
                std::vector<std::string> wrapper = {}, const std::string& listen = "127.0.0.1:0") {
    ::mkdir(dir.File("root").c_str(), 0755);
    WriteFileOrDie(dir.File("node.yaml"),
                   absl::StrCat("node: ", name, "\nlisten: ", listen, "\ngpus: 4\nroots: [", dir.File("root"),
                                "]\n", extra));
    process =
        std::make_unique<MetadProcess>(dir.File("node.yaml"), std::move(wrapper), dir.File("metad.log"));
    if (!process->address().empty()) stub = StubFor(process->address());
  }

  grpc::Status Status(v1::GetStatusResponse* out, int timeout_s = 5) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(timeout_s));
    return stub->GetStatus(&ctx, v1::GetStatusRequest(), out);
  }
  grpc::Status Join(const v1::NodeInfo& node) {
    grpc::ClientContext ctx;
    v1::JoinRequest request;
    *request.mutable_node() = node;
    v1::JoinResponse response;
    return stub->Join(&ctx, request, &response);
  }
  // Publishes a model of three [4, 8] BF16 tensors under its root, as a node agent would.
  grpc::Status Publish(v1::ModelRecord record) {
    grpc::ClientContext ctx;
    v1::PublishModelRequest request;
    *request.mutable_model() = std::move(record);
    v1::PublishModelResponse response;
    return PublishModel(*stub, &ctx, request, &response);
  }
  v1::ModelRecord Record() const {
    v1::ModelRecord r;
    r.set_name("m");
    r.set_checkpoint_dir(dir.File("root"));
    r.set_skeleton_json(R"({"format": "metaload.skeleton/1", "tensors": [
      {"name": "w0", "shape": [4, 8], "dtype": "BF16"}, {"name": "w1", "shape": [4, 8], "dtype": "BF16"}]})");
    r.set_registered_on("a");
    for (const char* name : {"w0", "w1"}) {
      v1::TensorLocation* t = r.add_tensors();
      t->set_name(name);
      t->set_dtype("BF16");
      t->add_shape(4);
      t->add_shape(8);
      t->set_file("model.safetensors");
      t->set_begin_offset(name[1] == '0' ? 8 : 72);
      t->set_end_offset(name[1] == '0' ? 72 : 136);
    }
    return r;
  }
  bool Alive() {
    v1::GetStatusResponse status;
    return Status(&status).ok();
  }
};

v1::NodeInfo Member(const std::string& name) {
  v1::NodeInfo n;
  n.set_name(name);
  n.set_address("127.0.0.1:9");
  n.set_gpu_count(2);
  n.set_gpu_memory_bytes(1 << 30);
  n.add_roots("/models");
  return n;
}

void ExpectRefused(const grpc::Status& s, grpc::StatusCode code, const std::string& part) {
  EXPECT_EQ(s.error_code(), code) << s.error_message();
  EXPECT_NE(s.error_message().find(part), std::string::npos) << s.error_message();
  EXPECT_LT(s.error_message().size(), 1024u) << "echoed input is cut";
}

TEST(ServiceRobustness, JoinIsValidatedLikeRegister) {
  Node d;
  v1::NodeInfo n = Member("b");
  n.set_gpu_count(-4);
  ExpectRefused(d.Join(n), grpc::StatusCode::INVALID_ARGUMENT, "gpu_count -4 is outside 0..1024");
  n = Member("b");
  n.set_gpu_count(std::numeric_limits<int32_t>::max() - 7);
  ExpectRefused(d.Join(n), grpc::StatusCode::INVALID_ARGUMENT, "gpu_count 2147483640");
  n = Member("b\nmetad I 12:00:00.000 forged");
  ExpectRefused(d.Join(n), grpc::StatusCode::INVALID_ARGUMENT, "node name \"b\\nmetad I");
  n = Member("b");
  n.clear_roots();
  n.add_roots(std::string(100 << 10, '/'));
  ExpectRefused(d.Join(n), grpc::StatusCode::INVALID_ARGUMENT, "roots hold more than 65536 bytes");
  // Past the 128 KiB a daemon takes per message, gRPC refuses it before the daemon reads it.
  n.clear_roots();
  n.add_roots(std::string(10 << 20, '/'));
  ExpectRefused(d.Join(n), grpc::StatusCode::RESOURCE_EXHAUSTED, "Received message larger than max (");
  n = Member("b");
  n.add_roots("/models/../../etc");
  ExpectRefused(d.Join(n), grpc::StatusCode::INVALID_ARGUMENT, "'..' component");
  // None of them joined; the plans of every later request are intact.
  v1::GetStatusResponse status;
  ASSERT_TRUE(d.Status(&status).ok());
  EXPECT_EQ(status.members_size(), 1);
}

TEST(ServiceRobustness, PublishIsValidatedAndCannotNameFilesOutsideTheCheckpoint) {
  Node d;
  v1::ModelRecord r = d.Record();
  r.mutable_tensors(0)->set_file("../../outside/x");
  ExpectRefused(d.Publish(r), grpc::StatusCode::INVALID_ARGUMENT,
                "\"../../outside/x\" has a '.' or '..' component");
  r = d.Record();
  r.set_name(std::string(60 << 20, 'm'));
  ExpectRefused(d.Publish(r), grpc::StatusCode::INVALID_ARGUMENT, "must have 1 to 128 characters");
  ASSERT_TRUE(d.Publish(d.Record()).ok());
}

v1::GetPlanRequest TpPlanRequest(int tp, int pp, int world) {
  v1::GetPlanRequest q;
  q.set_model("m");
  q.set_world_size(world);
  q.set_strategy("tp");
  q.set_tp(tp);
  q.set_pp(pp);
  return q;
}

// tp 4 x pp 2^30 overflowed int to 0 and killed the coordinator with SIGFPE, also through a
// node agent; tp 2 x pp 2^31-1 wrapped to -2 and allocated 16 GiB.
TEST(ServiceRobustness, HugePipelineOrTensorParallelIsRefusedNotFatal) {
  Node coordinator;
  Node agent("b", absl::StrCat("coordinator: ", coordinator.process->address(), "\n"));
  ASSERT_TRUE(coordinator.Publish(coordinator.Record()).ok());
  for (v1::Metad::Stub* stub : {coordinator.stub.get(), agent.stub.get()}) {
    for (auto [tp, pp] : {std::pair{4, 1 << 30}, std::pair{2, std::numeric_limits<int32_t>::max()},
                          std::pair{std::numeric_limits<int32_t>::max(), 1}}) {
      grpc::ClientContext ctx;
      v1::GetPlanResponse response;
      grpc::Status s = stub->GetPlan(&ctx, TpPlanRequest(tp, pp, 4), &response);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << tp << " x " << pp << ": " << s.error_message();
    }
  }
  EXPECT_TRUE(coordinator.Alive());
  EXPECT_TRUE(agent.Alive());
}

// A FIFO where a checkpoint file should be: opening it blocked a gRPC thread until a writer
// came, and with a few such requests every thread of the daemon hung.
TEST(ServiceRobustness, AFifoUnderARootDoesNotHangTheDaemon) {
  Node d;
  ASSERT_EQ(::mkfifo(d.dir.File("root/model.safetensors").c_str(), 0644), 0);
  ASSERT_TRUE(d.Publish(d.Record()).ok());  // registered while it was a file: reads reach the open
  std::vector<std::thread> readers;
  std::vector<grpc::StatusCode> codes(8);
  for (int i = 0; i < 8; ++i) {
    readers.emplace_back([&, i] {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      v1::ReadRangeRequest request;
      request.set_model("m");
      request.set_path(d.dir.File("root/model.safetensors"));
      request.set_offset(8);
      request.set_length(10);
      auto reader = d.stub->ReadRange(&ctx, request);
      v1::ReadRangeChunk chunk;
      while (reader->Read(&chunk)) {
      }
      codes[i] = reader->Finish().error_code();
    });
  }
  for (std::thread& t : readers) t.join();
  for (grpc::StatusCode code : codes) EXPECT_EQ(code, grpc::StatusCode::FAILED_PRECONDITION);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::RegisterModelRequest request;
  request.set_name("fifo");
  request.set_checkpoint_dir(d.dir.File("root"));
  v1::RegisterModelResponse response;
  grpc::Status s = RegisterModel(*d.stub, &ctx, request, &response);
  EXPECT_NE(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(d.Alive());
}

TEST(ServiceRobustness, AHugePathIsRefusedWithAShortMessage) {
  Node d;
  grpc::ClientContext ctx;
  v1::ReadRangeRequest request;
  request.set_path(std::string(100 << 10, 'p'));
  request.set_length(1);
  auto reader = d.stub->ReadRange(&ctx, request);
  v1::ReadRangeChunk chunk;
  EXPECT_FALSE(reader->Read(&chunk));
  ExpectRefused(reader->Finish(), grpc::StatusCode::INVALID_ARGUMENT,
                "(102400 bytes) must have 1 to 4096 bytes");
  // One of 1 MiB is over the 128 KiB a daemon takes per message: gRPC refuses it. (Past the
  // transports' 32 MiB, gRPC may reset the stream first: RESOURCE_EXHAUSTED all the same.)
  grpc::ClientContext huge_ctx;
  request.set_path(std::string(1 << 20, 'p'));
  auto huge = d.stub->ReadRange(&huge_ctx, request);
  EXPECT_FALSE(huge->Read(&chunk));
  ExpectRefused(huge->Finish(), grpc::StatusCode::RESOURCE_EXHAUSTED, "Received message larger than max (");
}

TEST(ServiceRobustness, AMemberThatStopsRejoiningExpires) {
  Node d("a", "member_timeout: 1s\n");
  ASSERT_TRUE(d.Join(Member("ghost")).ok());
  v1::GetStatusResponse status;
  ASSERT_TRUE(d.Status(&status).ok());
  EXPECT_EQ(status.members_size(), 2);
  absl::SleepFor(absl::Milliseconds(1500));
  status.Clear();
  ASSERT_TRUE(d.Status(&status).ok());
  ASSERT_EQ(status.members_size(), 1);
  EXPECT_EQ(status.members(0).name(), "a");
}

// gRPC sets SO_REUSEPORT by default: two daemons answered one port, each half the calls.
TEST(ServiceRobustness, ASecondDaemonOnAPortInUseFailsToStart) {
  const std::string listen = absl::StrCat("127.0.0.1:", testing::FreeLoopbackPort());
  Node first("a", "", {}, listen);
  ASSERT_EQ(first.process->address(), listen);
  Node second("b", "", {}, listen);
  EXPECT_TRUE(second.process->address().empty());
  EXPECT_EQ(second.process->ExitCodeWithin(10), 1);
  EXPECT_NE(testing::ReadFileOrDie(second.dir.File("metad.log")).find("cannot listen on " + listen),
            std::string::npos);
  EXPECT_TRUE(first.Alive());
}

// With 100 descriptors, 150 held connections made gRPC 1.51's listener fail accept4 with
// EMFILE and never accept again, although the process lived on. Once the flood ends, the
// daemon answers again.
TEST(ServiceRobustness, AcceptsAgainAfterAConnectionFloodExhaustedItsDescriptors) {
  Node d("a", "", {"prlimit", "--nofile=100:100"});
  ASSERT_FALSE(d.process->address().empty());
  const std::string& address = d.process->address();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<int> flood;
  for (int i = 0; i < 150; ++i) {
    int c = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(c);
      break;
    }
    flood.push_back(c);
  }
  EXPECT_GT(flood.size(), 100u);
  absl::SleepFor(absl::Seconds(2));
  for (int c : flood) ::close(c);
  bool answered = false;
  // Until a deadline, not a count of attempts: a refused connection fails at once, and a busy
  // machine may take a while to close the flood's connections (a count of 15 quick attempts
  // failed 1 run in 4 when a listener watch rebuilt the server after 3 s; daemon/net/ now sheds
  // what it has no descriptor for at once, accept_loop.h).
  const absl::Time give_up = absl::Now() + absl::Seconds(15);
  for (; absl::Now() < give_up && !answered; absl::SleepFor(absl::Milliseconds(250))) {
    // A fresh channel each time: a connection made before the flood would hide a dead listener.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto stub =
        v1::Metad::NewStub(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    v1::GetStatusResponse status;
    answered = stub->GetStatus(&ctx, v1::GetStatusRequest(), &status).ok();
  }
  EXPECT_TRUE(answered) << testing::ReadFileOrDie(d.dir.File("metad.log"));
}

TEST(ServiceRobustness, UnregisterForgetsAModel) {
  Node d;
  ASSERT_TRUE(d.Publish(d.Record()).ok());
  for (grpc::StatusCode expected : {grpc::StatusCode::OK, grpc::StatusCode::NOT_FOUND}) {
    grpc::ClientContext ctx;
    v1::UnregisterModelRequest request;
    request.set_name("m");
    v1::UnregisterModelResponse response;
    EXPECT_EQ(d.stub->UnregisterModel(&ctx, request, &response).error_code(), expected);
  }
  v1::GetStatusResponse status;
  ASSERT_TRUE(d.Status(&status).ok());
  EXPECT_EQ(status.models_size(), 0);
}

}  // namespace
}  // namespace metaload
