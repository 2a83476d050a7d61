// security/server_identity.h: the certificate name a planned server must prove, the pattern a
// daemon's answer carries, and what a refused server is called. The handshake itself is
// tests/integration/robustness/test_server_identity.py.
#include "security/server_identity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace metaload {
namespace {

using ::testing::HasSubstr;

TEST(ServerIdentity, ThePatternNamesEachNodesCertificate) {
  EXPECT_EQ(NodeCertificateNameFor("{node}", "b"), "b");
  EXPECT_EQ(NodeCertificateNameFor("node-{node}", "b"), "node-b");
  EXPECT_EQ(NodeCertificateNameFor("{node}.metaload.internal", "gpu-7"), "gpu-7.metaload.internal");
}

TEST(ServerIdentity, AnAnswersPatternIsEmptyOrHoldsTheNodeOnce) {
  for (const char* good : {"", "{node}", "node-{node}", "{node}.metaload.internal"}) {
    EXPECT_TRUE(CheckServerCertificatePattern(good).ok()) << good;
  }
  for (const char* bad : {"node", "{node}{node}", "metad {node}", "{node}\n"}) {
    const absl::Status refused = CheckServerCertificatePattern(bad);
    EXPECT_EQ(refused.code(), absl::StatusCode::kDataLoss) << bad;
    EXPECT_THAT(std::string(refused.message()), HasSubstr("which is not a tls.node_certificate pattern"))
        << bad;
  }
}

TEST(ServerIdentity, APresentedNameIsTheCommonNameElseTheFirstAlternativeName) {
  EXPECT_EQ(PresentedCertificateName({"node-b"}, {{"localhost"}, {}, {}, {"127.0.0.1"}}), "node-b");
  EXPECT_EQ(PresentedCertificateName({""}, {{}, {"spiffe://x/b"}, {}, {"127.0.0.1"}}), "spiffe://x/b");
  EXPECT_EQ(PresentedCertificateName({""}, {{}, {}, {}, {}}), "");
}

TEST(ServerIdentity, ARefusedServerIsRememberedUntilTheNodeAnswersThere) {
  ServerNameCheck check("b", "node-b");
  EXPECT_FALSE(check.Refused().has_value());
  const absl::Status refused = check.Check("mallory");
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(check.Refused(), "mallory");
  EXPECT_EQ(
      check.Explain("10.0.0.7:7070", "mallory"),
      "the server at 10.0.0.7:7070 is not node \"b\": its certificate is named \"mallory\", and node \"b\"'s "
      "must be named \"node-b\" (the coordinator's tls.node_certificate); nothing was sent to it, no token "
      "included");
  EXPECT_THAT(check.Explain("10.0.0.7:7070", ""), HasSubstr("its certificate names no one, and node"));
  EXPECT_TRUE(check.Check("node-b").ok());
  EXPECT_FALSE(check.Refused().has_value());
}

}  // namespace
}  // namespace metaload
