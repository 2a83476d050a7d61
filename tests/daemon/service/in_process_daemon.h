// A real metad service in this test process (daemon/service/node.h), on a loopback port picked
// by the kernel (plaintext): the node config given as YAML, its tokens and roles included, the backend chosen
// by Node::Start exactly as metad chooses it, and a stub to call it. Stopped (and left) by the destructor.
// Its `seams` make it fail as a disk or a host would (a FaultFileSystem, tests/faults/).
#ifndef METALOAD_TESTS_DAEMON_SERVICE_IN_PROCESS_DAEMON_H_
#define METALOAD_TESTS_DAEMON_SERVICE_IN_PROCESS_DAEMON_H_

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "daemon/config/node_config.h"
#include "daemon/service/node.h"
#include "proto/metaload.grpc.pb.h"
#include "proto/upload.h"

namespace metaload::testing {

class InProcessDaemon {
 public:
  // `yaml`: a node config without `listen` (127.0.0.1:0 is added). Call Start next. What
  // `seams` point to must outlive this.
  explicit InProcessDaemon(const std::string& yaml, ServiceSeams seams = {}) {
    absl::StatusOr<NodeConfig> config = ParseNodeConfig("listen: 127.0.0.1:0\n" + yaml, "node.yaml");
    EXPECT_TRUE(config.ok()) << config.status();
    if (!config.ok()) return;
    absl::StatusOr<ServerSecurity> security = LoadNodeSecurity(*config);
    EXPECT_TRUE(security.ok()) << security.status();
    if (!security.ok()) return;
    node_ = std::make_unique<::metaload::Node>(*config, *std::move(security), seams);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&node_->service());
    server_ = builder.BuildAndStart();
    EXPECT_NE(port_, 0);
    stub_ = v1::Metad::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials()));
  }
  ~InProcessDaemon() {
    if (node_ != nullptr) node_->Leave();
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      server_->Wait();
    }
  }

  // What Node::Start chose; the daemon serves from now on (and a node agent joins).
  absl::StatusOr<::metaload::Node::Role> Start() {
    absl::StatusOr<::metaload::Node::Role> role = node_->Start(port_, "localhost");
    if (role.ok()) node_->StartJoining();
    return role;
  }

  ::metaload::Node& node() { return *node_; }
  v1::Metad::Stub& stub() { return *stub_; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  // RegisterModel `name` from `checkpoint_dir`, as metactl register sends it.
  grpc::Status Register(const std::string& name, const std::string& checkpoint_dir) {
    grpc::ClientContext ctx;
    v1::RegisterModelRequest request;
    request.set_name(name);
    request.set_checkpoint_dir(checkpoint_dir);
    v1::RegisterModelResponse response;
    return RegisterModel(*stub_, &ctx, request, &response);
  }

  // Joins `count` made-up members "<prefix><i>" at 127.0.0.1:<first_port + i>, each with `gpus`
  // GPUs of 80 GiB and no roots, as any member may; the first refusal.
  grpc::Status JoinFakeMembers(const std::string& prefix, int count, int gpus, int first_port = 10000) {
    for (int i = 0; i < count; ++i) {
      grpc::ClientContext ctx;
      v1::JoinRequest join;
      join.mutable_node()->set_name(absl::StrCat(prefix, i));
      join.mutable_node()->set_address(absl::StrCat("127.0.0.1:", first_port + i));
      join.mutable_node()->set_gpu_count(gpus);
      join.mutable_node()->set_gpu_memory_bytes(80ull << 30);
      v1::JoinResponse joined;
      if (grpc::Status status = stub_->Join(&ctx, join, &joined); !status.ok()) return status;
    }
    return grpc::Status::OK;
  }

 private:
  std::unique_ptr<::metaload::Node> node_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<v1::Metad::Stub> stub_;
};

}  // namespace metaload::testing

#endif  // METALOAD_TESTS_DAEMON_SERVICE_IN_PROCESS_DAEMON_H_
