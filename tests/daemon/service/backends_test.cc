// A real MetadService in this process: the backend Node::Start chooses for each node config,
// a coordinator and a node agent forwarding plans to it, what a daemon that is still starting
// answers, and what an agent and an etcd peer say to calls only a coordinator takes.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "daemon/registry/record_store.h"
#include "daemon/service/peer.h"
#include "proto/convert.h"
#include "proto/upload.h"
#include "tests/daemon/model_records.h"
#include "tests/daemon/service/in_process_daemon.h"

namespace metaload {
namespace {

using ::metaload::testing::InProcessDaemon;
using ::metaload::testing::OneTensorModel;
using ::testing::HasSubstr;

grpc::Status Publish(v1::Metad::Stub& stub, const v1::ModelRecord& record) {
  grpc::ClientContext ctx;
  v1::PublishModelRequest request;
  *request.mutable_model() = record;
  v1::PublishModelResponse response;
  return PublishModel(stub, &ctx, request, &response);
}

grpc::Status JoinNode(v1::Metad::Stub& stub, const std::string& node) {
  grpc::ClientContext ctx;
  v1::JoinRequest request;
  *request.mutable_node() = NodeSpecToProto(NodeSpec{node, "127.0.0.1:9", 1, 1 << 30, {}});
  v1::JoinResponse response;
  return stub.Join(&ctx, request, &response);
}

absl::StatusOr<v1::GetStatusResponse> Status(v1::Metad::Stub& stub) {
  grpc::ClientContext ctx;
  v1::GetStatusResponse response;
  grpc::Status status = stub.GetStatus(&ctx, v1::GetStatusRequest{}, &response);
  if (!status.ok()) return FromGrpcStatus(status, "GetStatus");
  return response;
}

TEST(Backends, ANodeWithoutCoordinatorCoordinatesAndOneThatNamesAnotherIsItsAgent) {
  InProcessDaemon coordinator("node: a\ngpus: 1\n");
  ASSERT_EQ(coordinator.Start().value(), Node::Role::kCoordinator);
  InProcessDaemon agent(absl::StrCat("node: b\ngpus: 1\ncoordinator: ", coordinator.address(), "\n"));
  ASSERT_EQ(agent.Start().value(), Node::Role::kAgent);

  absl::StatusOr<v1::GetStatusResponse> of_coordinator = Status(coordinator.stub());
  ASSERT_TRUE(of_coordinator.ok()) << of_coordinator.status();
  EXPECT_TRUE(of_coordinator->is_coordinator());
  EXPECT_EQ(of_coordinator->coordinator(), coordinator.address());
  EXPECT_EQ(of_coordinator->self().address(), coordinator.address()) << "the port the kernel picked";
  absl::StatusOr<v1::GetStatusResponse> of_agent = Status(agent.stub());
  ASSERT_TRUE(of_agent.ok()) << of_agent.status();
  EXPECT_FALSE(of_agent->is_coordinator());
  EXPECT_EQ(of_agent->coordinator(), coordinator.address());
  EXPECT_TRUE(of_agent->members().empty()) << "an agent holds no members";
}

TEST(Backends, AnAgentForwardsPlansToItsCoordinatorAndSaysItAnswered) {
  InProcessDaemon coordinator("node: a\ngpus: 1\n");
  ASSERT_TRUE(coordinator.Start().ok());
  InProcessDaemon agent(absl::StrCat("node: b\ngpus: 1\ncoordinator: ", coordinator.address(), "\n"));
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(Publish(coordinator.stub(), OneTensorModel("/models/m", 8, 4)).ok());
  // The agent's joiner joins at once; wait until the coordinator plans on both.
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<v1::GetStatusResponse> status = Status(coordinator.stub());
    if (status.ok() && status->members_size() == 2) break;
    absl::SleepFor(absl::Milliseconds(50));
  }

  auto plan = [](v1::Metad::Stub& stub, std::optional<int> rank) {
    grpc::ClientContext ctx;
    v1::GetPlanRequest request;
    request.set_model("m");
    request.set_world_size(2);
    if (rank.has_value()) request.set_rank(*rank);
    v1::GetPlanResponse response;
    grpc::Status status = stub.GetPlan(&ctx, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  };
  for (std::optional<int> rank : {std::optional<int>(0), std::optional<int>(1), std::optional<int>()}) {
    v1::GetPlanResponse direct = plan(coordinator.stub(), rank);
    v1::GetPlanResponse forwarded = plan(agent.stub(), rank);
    EXPECT_EQ(direct.answered_by(), "a");
    EXPECT_EQ(forwarded.answered_by(), "b") << "the agent's name replaces the coordinator's";
    EXPECT_EQ(forwarded.plan().world_size(), 2);
    EXPECT_FALSE(forwarded.plan_digest().empty());
    forwarded.clear_answered_by();
    direct.clear_answered_by();
    EXPECT_EQ(forwarded.SerializeAsString(), direct.SerializeAsString()) << "forwarded byte for byte";
  }

  grpc::ClientContext ctx;
  v1::GetLayoutRequest request;
  request.set_model("m");
  v1::GetLayoutResponse layout;
  ASSERT_TRUE(agent.stub().GetLayout(&ctx, request, &layout).ok());
  EXPECT_EQ(layout.answered_by(), "b");
  EXPECT_EQ(layout.checkpoint_dir(), "/models/m");

  grpc::ClientContext missing_ctx;
  request.set_model("none");
  grpc::Status missing = agent.stub().GetLayout(&missing_ctx, request, &layout);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(missing.error_message(), HasSubstr(absl::StrCat("coordinator ", coordinator.address(), ": ")));
}

TEST(Backends, OnlyTheCoordinatorTakesMembersAndTheirModels) {
  InProcessDaemon coordinator("node: a\ngpus: 1\n");
  ASSERT_TRUE(coordinator.Start().ok());
  InProcessDaemon agent(absl::StrCat("node: b\ngpus: 1\ncoordinator: ", coordinator.address(), "\n"));
  ASSERT_TRUE(agent.Start().ok());
  EXPECT_TRUE(JoinNode(coordinator.stub(), "c").ok());
  grpc::Status joined = JoinNode(agent.stub(), "c");
  EXPECT_EQ(joined.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(joined.error_message(), absl::StrCat("b is not the coordinator; join ", coordinator.address()));
  grpc::Status published = Publish(agent.stub(), OneTensorModel("/models/m", 8, 4));
  EXPECT_EQ(published.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(published.error_message(), "b is not the coordinator");
  v1::ModelRecord bad = OneTensorModel("/models/m", 8, 4);
  bad.set_name("");
  EXPECT_EQ(Publish(agent.stub(), bad).error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << "the role is judged before the request";
  EXPECT_EQ(Publish(coordinator.stub(), bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(Backends, ADaemonThatHasNotStartedIsUnavailable) {
  InProcessDaemon starting("node: a\ngpus: 1\n");
  absl::StatusOr<v1::GetStatusResponse> status = Status(starting.stub());
  EXPECT_EQ(status.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.status().message(), HasSubstr("a is starting; try again"));
  ASSERT_TRUE(starting.Start().ok());
  EXPECT_TRUE(Status(starting.stub()).ok());
}

// An etcd registry's records in memory: what other peers wrote.
class MemoryStore : public SharedRecordStore {
 public:
  absl::StatusOr<StoredModels> Load() override { return StoredModels{}; }
  absl::Status Put(const v1::ModelRecord& record) override {
    absl::MutexLock lock(&mu_);
    records_[record.name()] = record;
    return absl::OkStatus();
  }
  absl::Status Remove(const std::string& name) override {
    absl::MutexLock lock(&mu_);
    records_.erase(name);
    return absl::OkStatus();
  }
  std::string Describe() const override { return "memory"; }
  absl::StatusOr<std::optional<StoredRecord>> GetForUpdate(const std::string& name) override {
    absl::MutexLock lock(&mu_);
    auto it = records_.find(name);
    if (it == records_.end()) return std::nullopt;
    return StoredRecord{"memory key " + name, it->second};
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, v1::ModelRecord> records_ ABSL_GUARDED_BY(mu_);
};

TEST(Backends, APeerRefusesMembersAndLearnsModelsOtherPeersRegistered) {
  MemoryStore store;  // outlives the daemon, whose registry writes it
  InProcessDaemon daemon("node: p\ngpus: 1\n");
  MetadService& service = daemon.node().service();
  service.Start(std::make_unique<Peer>(service.BindAddress(daemon.address()), &store, "etcd://h:2379"));

  grpc::Status joined = JoinNode(daemon.stub(), "c");
  EXPECT_EQ(joined.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(
      joined.error_message(),
      "p has no coordinator: its registry is etcd://h:2379, where every daemon is a peer; give the calling "
      "node `registry: etcd://h:2379` instead of `coordinator:`");
  grpc::Status published = Publish(daemon.stub(), OneTensorModel("/models/m", 8, 4));
  EXPECT_EQ(published.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(published.error_message(), joined.error_message());

  absl::StatusOr<v1::GetStatusResponse> status = Status(daemon.stub());
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(status->is_coordinator()) << "a peer answers itself";
  EXPECT_EQ(status->registry(), "etcd://h:2379");

  // Registered on another peer a moment ago: read from the store before NOT_FOUND.
  ASSERT_TRUE(store.Put(OneTensorModel("/models/m", 8, 4)).ok());
  grpc::ClientContext ctx;
  v1::GetLayoutRequest request;
  request.set_model("m");
  v1::GetLayoutResponse layout;
  grpc::Status found = daemon.stub().GetLayout(&ctx, request, &layout);
  ASSERT_TRUE(found.ok()) << found.error_message();
  EXPECT_EQ(layout.answered_by(), "p");
  EXPECT_EQ(layout.tensors_size(), 1);
}

}  // namespace
}  // namespace metaload
