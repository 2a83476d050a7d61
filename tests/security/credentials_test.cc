// security/: token files, the token compare, client credential files, what a failed
// handshake is called, and the roles tokens and certificates grant. The end-to-end TLS tests are
// tests/integration/robustness/test_security.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "security/client_credentials.h"
#include "security/handshake_errors.h"
#include "security/server_security.h"
#include "security/token.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

using ::metaload::testing::TempDir;
using ::testing::HasSubstr;

std::string Write(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.path() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Token, ReadsTheFileWithoutItsTrailingNewline) {
  TempDir dir;
  auto token = ReadTokenFile(Write(dir, "t", "abc-123_XYZ\n"), "--token-file");
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "abc-123_XYZ");
}

TEST(Token, RefusesEmptyLongUnprintableAndMissingFilesWithoutPrintingThem) {
  TempDir dir;
  struct Case {
    std::string content, message;
  };
  for (const Case& c :
       {Case{"\n", "is empty"}, Case{std::string(kMaxTokenBytes + 1, 'a'), "longer than 4096 bytes"},
        Case{std::string(kMaxTokenBytes + 10, 'a'), "too large for a token file"},
        Case{"secret with space", "must be printable ASCII without spaces"},
        Case{"secret\x01", "must be printable ASCII without spaces"}}) {
    auto token = ReadTokenFile(Write(dir, "t", c.content), "METALOAD_TOKEN_FILE");
    ASSERT_FALSE(token.ok()) << c.message;
    EXPECT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(token.status().message()), HasSubstr(c.message));
    EXPECT_THAT(std::string(token.status().message()), HasSubstr("METALOAD_TOKEN_FILE: "));
    EXPECT_THAT(std::string(token.status().message()), ::testing::Not(HasSubstr("secret")));
  }
  auto missing = ReadTokenFile(dir.path() + "/none", "--token-file");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("--token-file: cannot open"));
}

TEST(Token, BearerMatchesOnlyTheExactHeader) {
  EXPECT_TRUE(BearerMatches("Bearer tok", "tok"));
  EXPECT_FALSE(BearerMatches("Bearer tok2", "tok"));
  EXPECT_FALSE(BearerMatches("Bearer to", "tok"));
  EXPECT_FALSE(BearerMatches("bearer tok", "tok"));
  EXPECT_FALSE(BearerMatches("tok", "tok"));
  EXPECT_FALSE(BearerMatches("", "tok"));
  EXPECT_FALSE(BearerMatches(std::string(1 << 20, 'B'), "tok"));
}

TEST(ClientCredentials, NoneSetIsPlaintextWithoutToken) {
  auto credentials = LoadClientCredentials(CredentialFiles{});
  ASSERT_TRUE(credentials.ok());
  EXPECT_FALSE(credentials->tls);
  EXPECT_TRUE(credentials->token.empty());
}

TEST(ClientCredentials, RefusesHalfAPairAndFilesThatAreNotPem) {
  TempDir dir;
  CredentialFiles files;
  files.cert = Write(dir, "cert.pem", "-----BEGIN CERTIFICATE-----\nAA\n-----END CERTIFICATE-----\n");
  auto loaded = LoadClientCredentials(files);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(loaded.status().message()),
              HasSubstr("--tls-cert is set but not --tls-key: a client certificate needs its private key"));
  files = CredentialFiles{};
  files.ca = Write(dir, "ca.pem", "not a certificate");
  loaded = LoadClientCredentials(files);
  EXPECT_THAT(std::string(loaded.status().message()),
              HasSubstr("--tls-ca: " + files.ca + " is not a PEM CA certificate"));
  files = CredentialFiles{};
  files.cert = Write(dir, "cert.pem", "-----BEGIN CERTIFICATE-----\nAA\n-----END CERTIFICATE-----\n");
  files.key = Write(dir, "key.pem", "-----BEGIN CERTIFICATE-----\n");
  loaded = LoadClientCredentials(files);
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("is not a PEM private key"));
  files.key = Write(dir, "key.pem", "-----BEGIN PRIVATE KEY-----\nAA\n-----END PRIVATE KEY-----\n");
  loaded = LoadClientCredentials(files);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->tls);  // a client certificate without --tls-ca: TLS with the system's roots
  EXPECT_TRUE(loaded->ca_pem.empty());
}

TEST(ClientCredentials, FlagsOverrideTheEnvironmentOneByOne) {
  CredentialFiles env;
  env.ca = "/env/ca.pem";
  env.token = "/env/token";
  env.ca_from = "METALOAD_TLS_CA";
  env.token_from = "METALOAD_TOKEN_FILE";
  CredentialFiles flags;
  flags.token = "/flag/token";
  CredentialFiles merged = MergeCredentialFiles(flags, env);
  EXPECT_EQ(merged.ca, "/env/ca.pem");
  EXPECT_EQ(merged.ca_from, "METALOAD_TLS_CA");
  EXPECT_EQ(merged.token, "/flag/token");
  EXPECT_EQ(merged.token_from, "--token-file");
}

TEST(HandshakeFailure, NamesWhatToFix) {
  // gRPC 1.51 with OpenSSL 3, as seen by metactl (tests/integration/robustness/test_security.py).
  HandshakeFailure bad_ca = ExplainHandshakeFailure(
      "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:7391: Ssl handshake failed: "
      "SSL_ERROR_SSL: error:0A000086:SSL routines::certificate verify failed",
      true, false);
  EXPECT_TRUE(bad_ca.certain);
  EXPECT_THAT(bad_ca.explanation, HasSubstr("server certificate not signed by the given CA"));
  HandshakeFailure plaintext_server = ExplainHandshakeFailure(
      "Ssl handshake failed: SSL_ERROR_SSL: error:0A00010B:SSL routines::wrong version number", true, false);
  EXPECT_THAT(plaintext_server.explanation, HasSubstr("the daemon does not speak TLS"));
  const char* closed =
      "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: Socket closed";
  EXPECT_THAT(ExplainHandshakeFailure(closed, false, false).explanation,
              HasSubstr("if it uses TLS, give --tls-ca"));
  EXPECT_THAT(ExplainHandshakeFailure(closed, true, false).explanation,
              HasSubstr("it requires a client certificate"));
  EXPECT_THAT(ExplainHandshakeFailure(closed, true, true).explanation,
              HasSubstr("it refused this client certificate"));
  EXPECT_FALSE(ExplainHandshakeFailure(closed, true, true).certain);
  for (bool tls : {false, true}) {  // a daemon at its connection limits closes the same way
    EXPECT_THAT(
        ExplainHandshakeFailure(closed, tls, tls).explanation,
        HasSubstr("or it already holds max_connections, or max_connections_per_client from this host"));
  }
  EXPECT_EQ(ExplainHandshakeFailure("Connection refused", false, false).explanation, "");
}

}  // namespace
}  // namespace metaload

namespace metaload {
namespace {

// Roles (issue 23): what each token grants, what a daemon dials with, and what roles a
// certificate name holds.
TEST(ServerRoles, EachRolesTokenGrantsItsRoleAndTheDaemonDialsWithItsMemberToken) {
  TempDir dir;
  ServerSecurityFiles files;
  files.source = "node.yaml";
  files.role_token_files = {{"reader", Write(dir, "ranks.token", "r-secret\n")},
                            {"member", Write(dir, "node-b.token", "m-secret\n")},
                            {"member", Write(dir, "node-c.token", "m2-secret\n")},
                            {"admin", Write(dir, "ops.token", "a-secret\n")}};
  absl::StatusOr<ServerSecurity> security = LoadServerSecurity(files);
  ASSERT_TRUE(security.ok()) << security.status();
  ASSERT_EQ(security->tokens.size(), 4u);
  EXPECT_EQ(security->tokens[0].roles, Bit(Role::kReader));
  EXPECT_EQ(security->tokens[1].roles, Bit(Role::kReader) | Bit(Role::kMember));
  EXPECT_EQ(security->tokens[3].roles, Bit(Role::kReader) | Bit(Role::kAdmin));
  EXPECT_EQ(security->tokens[1].identity, "token:member:node-b.token") << "the file's name, never the token";
  EXPECT_EQ(security->as_client.token, "m-secret") << "the first member token is its own";
  EXPECT_EQ(security->as_admin.token, "a-secret");
  EXPECT_TRUE(CheckBearer(*security, "Bearer m2-secret").ok());
  EXPECT_EQ(CheckBearer(*security, "Bearer m2-secre").message(),
            "token refused: it is none of this metad's auth_tokens");
  EXPECT_EQ(security->RoleNotes(), std::vector<std::string>{"tokens: 1 reader, 2 member, 1 admin"});

  files.role_token_files.push_back({"admin", Write(dir, "copy.token", "r-secret\n")});
  absl::StatusOr<ServerSecurity> same = LoadServerSecurity(files);
  ASSERT_FALSE(same.ok());
  EXPECT_THAT(
      same.status().message(),
      HasSubstr("node.yaml: auth_tokens.admin: " + dir.path() +
                "/copy.token holds the same token as another file of auth_tokens: give each its own"));
  EXPECT_THAT(same.status().message(), ::testing::Not(HasSubstr("r-secret")));
}

TEST(ServerRoles, CertificatePatternsGrantRolesAndUnsetMeansEveryRole) {
  CertificateRoles roles;
  EXPECT_EQ(RolesOfCertificate("anyone", roles), kAllRoles) << "tls.roles not set";
  roles.configured = true;
  roles.patterns = {{"node-*", Role::kMember}, {"alice", Role::kAdmin}, {"job-[0-9]*", Role::kReader}};
  EXPECT_EQ(RolesOfCertificate("node-b", roles), Grant(Role::kMember));
  EXPECT_EQ(RolesOfCertificate("alice", roles), Grant(Role::kAdmin));
  EXPECT_EQ(RolesOfCertificate("job-42", roles), Bit(Role::kReader));
  EXPECT_EQ(RolesOfCertificate("mallory", roles), kNoRoles);
  EXPECT_EQ(DescribeRoles(kNoRoles), "no role");
  EXPECT_EQ(DescribeRoles(Bit(Role::kMember) | Bit(Role::kAdmin), " or "), "member or admin");
}

// Issue 35: gRPC lists an empty common name for a certificate without one; its name was then "",
// which skipped Join's certificate name rule, and it joined under any name.
TEST(CertificateName, CommonNameElseFirstAlternativeNameElseNoOne) {
  EXPECT_EQ(CertificateName({"node-b"}, {"localhost", "127.0.0.1"}), "node-b");
  EXPECT_EQ(CertificateName({""}, {"node-x", "127.0.0.1"}), "node-x");
  EXPECT_EQ(CertificateName({}, {"", "node-x"}), "node-x");
  EXPECT_EQ(CertificateName({""}, {}), "");
  EXPECT_EQ(CertificateIdentity("node-b"), "cert:node-b");
  // Names no binding could keep are quoted: no usable name equals them, and none is a member.
  EXPECT_EQ(CertificateIdentity(""), "cert:\"\"");
  EXPECT_EQ(CertificateIdentity("Node B"), "cert:\"Node B\"");
  EXPECT_EQ(CertificateIdentity("b\x1b[2J"), "cert:\"b\\x1b[2J\"");
}

}  // namespace
}  // namespace metaload
