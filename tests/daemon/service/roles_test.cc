// Roles (issue 23): a real MetadService in this process with `auth_tokens`, called with each
// role's token. Before roles, any token holder could do anything: publish over a real model
// with replace, register, release names, and read every daemon's roots in GetStatus.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "proto/convert.h"
#include "proto/upload.h"
#include "security/client_credentials.h"
#include "tests/daemon/model_records.h"
#include "tests/daemon/service/in_process_daemon.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

using ::metaload::testing::OneTensorModel;

class RolesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"reader", "node-b", "stranger", "admin"}) {
      testing::WriteFileOrDie(dir_.File(absl::StrCat(name, ".token")),
                              absl::StrCat("secret-of-", name, "\n"));
    }
    daemon_ = std::make_unique<testing::InProcessDaemon>(absl::StrCat(
        "node: a\ngpus: 1\nroots: [", dir_.path(), "]\nauth_tokens:\n  reader: ", dir_.File("reader.token"),
        "\n  member: [", dir_.File("node-b.token"), ", ", dir_.File("stranger.token"),
        "]\n  admin: ", dir_.File("admin.token"), "\n"));
    ASSERT_TRUE(daemon_->Start().ok());
  }

  // A stub whose calls carry `who`'s token.
  std::unique_ptr<v1::Metad::Stub> As(const std::string& who) {
    ClientCredentials credentials;
    credentials.token = absl::StrCat("secret-of-", who);
    return v1::Metad::NewStub(DialDaemon(daemon_->address(), grpc::ChannelArguments(), credentials));
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::InProcessDaemon> daemon_;
};

grpc::Status Publish(v1::Metad::Stub& stub, const v1::ModelRecord& record, bool replace) {
  grpc::ClientContext ctx;
  v1::PublishModelRequest request;
  *request.mutable_model() = record;
  request.set_replace(replace);
  v1::PublishModelResponse response;
  return PublishModel(stub, &ctx, request, &response);
}

grpc::Status Join(v1::Metad::Stub& stub, const std::string& node, bool release = false,
                  std::vector<std::string> roots = {"/models"}) {
  grpc::ClientContext ctx;
  v1::JoinRequest request;
  *request.mutable_node() = NodeSpecToProto(NodeSpec{node, "127.0.0.1:9", 1, 1 << 30, std::move(roots)});
  request.set_release(release);
  v1::JoinResponse response;
  return stub.Join(&ctx, request, &response);
}

grpc::Status Register(v1::Metad::Stub& stub, const std::string& dir) {
  grpc::ClientContext ctx;
  v1::RegisterModelRequest request;
  request.set_name("m");
  request.set_checkpoint_dir(dir);
  v1::RegisterModelResponse response;
  return RegisterModel(stub, &ctx, request, &response);
}

void ExpectDenied(const grpc::Status& status, const std::string& message) {
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr(message));
}

TEST_F(RolesTest, AReaderReadsButNeitherRegistersNorJoinsNorPublishes) {
  auto reader = As("reader");
  ExpectDenied(Register(*reader, dir_.path()),
               "a: RegisterModel needs the admin role; this caller (token:reader:reader.token) holds reader");
  ExpectDenied(Join(*reader, "b"), "a: Join needs the member role; this caller (token:reader:reader.token)");
  ExpectDenied(
      Publish(*reader, OneTensorModel(dir_.path(), 4, 4), false),
      "PublishModel needs the member or admin role; this caller (token:reader:reader.token) holds reader");
  grpc::ClientContext ctx;
  v1::UnregisterModelRequest unregister;
  unregister.set_name("m");
  v1::UnregisterModelResponse unregistered;
  ExpectDenied(reader->UnregisterModel(&ctx, unregister, &unregistered),
               "UnregisterModel needs the admin role");
}

// A model registered on member b (node_restriction.h: a member publishes its own node's only).
v1::ModelRecord OnB(const std::string& dir, int64_t rows, int64_t cols) {
  v1::ModelRecord record = OneTensorModel(dir, rows, cols);
  record.set_registered_on("b");
  return record;
}

TEST_F(RolesTest, OnlyAnAdminReplacesAModel) {
  auto member = As("node-b");
  ASSERT_TRUE(Join(*member, "b", false, {dir_.path()}).ok());
  const grpc::Status published = Publish(*member, OnB(dir_.path(), 4, 4), false);
  ASSERT_TRUE(published.ok()) << published.error_message();
  // The forged replacement every rank would then load (issue 23).
  ExpectDenied(Publish(*member, OnB(dir_.path(), 2, 8), true),
               "PublishModel --replace needs the admin role; this caller (token:member:node-b.token) holds "
               "reader, member");
  ExpectDenied(Register(*member, dir_.path()), "RegisterModel needs the admin role");
  EXPECT_TRUE(Publish(*As("admin"), OneTensorModel(dir_.path(), 2, 8), true).ok());
  // An admin's upload is read (it may be a --replace), then refused as what it asks: publishing
  // without replacing is a member's.
  ExpectDenied(
      Publish(*As("admin"), OneTensorModel(dir_.path(), 2, 8), false),
      "a: PublishModel needs the member role; this caller (token:admin:admin.token) holds reader, admin");
}

TEST_F(RolesTest, AMembersNameIsItsOwnUntilAnAdminReleasesIt) {
  ASSERT_TRUE(Join(*As("node-b"), "b").ok());
  grpc::Status taken = Join(*As("stranger"), "b");
  ExpectDenied(taken,
               "node \"b\" joined as token:member:node-b.token; a Join as token:member:stranger.token");
  ExpectDenied(Join(*As("node-b"), "b", /*release=*/true),
               "Join (release) needs the admin role; this caller (token:member:node-b.token)");
  ASSERT_TRUE(Join(*As("admin"), "b", /*release=*/true).ok());
  EXPECT_TRUE(Join(*As("stranger"), "b").ok()) << "released: the name is free";
  EXPECT_EQ(Join(*As("admin"), "nobody", /*release=*/true).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(RolesTest, GetStatusShowsAReaderNoRoots) {
  ASSERT_TRUE(Join(*As("node-b"), "b").ok());
  for (const char* who : {"reader", "node-b", "admin"}) {
    grpc::ClientContext ctx;
    v1::GetStatusResponse status;
    ASSERT_TRUE(As(who)->GetStatus(&ctx, v1::GetStatusRequest{}, &status).ok()) << who;
    ASSERT_EQ(status.members_size(), 2) << who;
    const bool reader = std::string(who) == "reader";
    EXPECT_EQ(status.self().roots_size(), reader ? 0 : 1) << who;
    EXPECT_EQ(status.members(1).roots_size(), reader ? 0 : 1) << who;
    EXPECT_EQ(status.members(1).address(), "127.0.0.1:9") << who << ": a plan names it anyway";
  }
}

// Issue 35: one member token joined 4,094 made-up names. A member token is one daemon's: it
// holds at most max_names_per_identity (4) names, up or down, until an admin releases one.
TEST_F(RolesTest, AMemberTokenHoldsAtMostMaxNamesPerIdentityNames) {
  auto stranger = As("stranger");
  for (const char* name : {"x0", "x1", "x2", "x3"}) ASSERT_TRUE(Join(*stranger, name).ok()) << name;
  const grpc::Status fifth = Join(*stranger, "x4");
  EXPECT_EQ(fifth.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(
      fifth.error_message(),
      "token:member:stranger.token already holds 4 node names, up or down (max_names_per_identity in the "
      "coordinator's config); an admin frees one with `metactl release NAME`");
  EXPECT_TRUE(Join(*As("node-b"), "b").ok()) << "another token's names are its own";
  ASSERT_TRUE(Join(*As("admin"), "x0", /*release=*/true).ok());
  EXPECT_TRUE(Join(*stranger, "x4").ok()) << "released: one more";
  grpc::ClientContext ctx;
  v1::GetStatusResponse status;
  ASSERT_TRUE(As("reader")->GetStatus(&ctx, v1::GetStatusRequest{}, &status).ok());
  EXPECT_EQ(status.member_counts().up(), 6u);  // a, b, x1..x4
  EXPECT_EQ(status.member_states_size(), 6);
}

TEST_F(RolesTest, AWrongTokenIsUnauthenticatedAndNamesNoRole) {
  grpc::ClientContext ctx;
  v1::GetStatusResponse status;
  grpc::Status refused = As("nobody")->GetStatus(&ctx, v1::GetStatusRequest{}, &status);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(refused.error_message(), "a: token refused: it is none of this metad's auth_tokens");
}

}  // namespace
}  // namespace metaload
