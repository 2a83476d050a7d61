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

 private:
  std::unique_ptr<::metaload::Node> node_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<v1::Metad::Stub> stub_;
};

}  // namespace metaload::testing

#endif  // METALOAD_TESTS_DAEMON_SERVICE_IN_PROCESS_DAEMON_H_
