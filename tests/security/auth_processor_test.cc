// security/auth_processor.h: a call without the token is refused on its headers, before any
// handler runs, over plaintext (where gRPC 1.51's own plaintext credentials take no processor)
// as over TLS. The memory it saves is measured end to end by
// tests/integration/robustness/test_preauth_memory.py.
#include "security/auth_processor.h"

#include <gmock/gmock.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <string>

#include "security/server_security.h"
#include "security/token.h"

namespace metaload {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "t0ken";

ServerSecurity OneToken() {
  ServerSecurity security;
  security.tokens.push_back({kToken, kAllRoles, "token", TokenDigest(kToken)});
  return security;
}

absl::Status MatchesTestToken(std::optional<absl::string_view> authorization) {
  static const ServerSecurity security = OneToken();
  return CheckBearer(security, authorization);
}

TEST(CheckBearer, NamesWhatIsWrongNeverTheHeader) {
  absl::Status missing = MatchesTestToken(std::nullopt);
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(missing.message()), HasSubstr("no token: this metad requires"));
  absl::Status wrong = MatchesTestToken("Bearer guess");
  EXPECT_EQ(wrong.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(wrong.message(), "token refused: it is not this metad's auth_token_file");
  EXPECT_TRUE(MatchesTestToken("Bearer t0ken").ok());
  EXPECT_TRUE(CheckBearer(ServerSecurity{}, std::nullopt).ok()) << "no token required";
}

// Answers every method OK and counts the calls that reached it.
class CountingService final : public grpc::CallbackGenericService {
 public:
  std::atomic<int> calls{0};

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* /*ctx*/) override {
    calls.fetch_add(1);
    class Reactor final : public grpc::ServerGenericBidiReactor {
     public:
      Reactor() { Finish(grpc::Status::OK); }
      void OnDone() override { delete this; }
    };
    return new Reactor;
  }
};

grpc::Status Call(grpc::GenericStub& stub, const std::string& authorization) {
  grpc::ClientContext ctx;
  if (!authorization.empty()) ctx.AddMetadata(kAuthorizationHeader, authorization);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/test.Any/Method", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status status) { done.set_value(std::move(status)); });
  return done.get_future().get();
}

TEST(WithHeaderAuthentication, PlaintextCallsWithoutTheTokenNeverReachAHandler) {
  CountingService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(
      "127.0.0.1:0",
      WithHeaderAuthentication(grpc::InsecureServerCredentials(), /*tls=*/false, "node-a", MatchesTestToken),
      &port);
  builder.RegisterCallbackGenericService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  grpc::GenericStub stub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));

  grpc::Status missing = Call(stub, "");
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(missing.error_message(), HasSubstr("node-a: no token"));
  grpc::Status wrong = Call(stub, "Bearer guess");
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(wrong.error_message(), HasSubstr("node-a: token refused"));
  EXPECT_EQ(service.calls.load(), 0);

  EXPECT_TRUE(Call(stub, "Bearer t0ken").ok());
  EXPECT_EQ(service.calls.load(), 1);
  server->Shutdown();
}

}  // namespace
}  // namespace metaload
