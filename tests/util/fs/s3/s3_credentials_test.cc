// The AWS credentials chain as every S3 tool reads it, and its worst inputs: nothing in any
// message may carry a secret, whatever the file holds.
#include "util/fs/s3/s3_credentials.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace metaload {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class Chain : public ::testing::Test {
 protected:
  void SetUp() override {
    home_ = std::filesystem::path(::testing::TempDir()) /
            ("home-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(home_);
    std::filesystem::create_directories(home_ / ".aws");
  }
  void Write(const std::string& relative, const std::string& text) {
    std::ofstream(home_ / relative, std::ios::binary) << text;
  }
  absl::StatusOr<S3Settings> Load(const std::string& credentials_file = "") {
    S3SettingsSources sources;
    sources.getenv = [this](const char* name) -> const char* {
      auto it = env_.find(name);
      return it == env_.end() ? nullptr : it->second.c_str();
    };
    sources.home = home_.string();
    sources.credentials_file = credentials_file;
    return LoadS3Settings(sources);
  }
  std::filesystem::path home_;
  std::map<std::string, std::string> env_;
};

TEST_F(Chain, EnvironmentFirst) {
  env_ = {{"AWS_ACCESS_KEY_ID", "AKIDENV"},
          {"AWS_SECRET_ACCESS_KEY", "secretenv"},
          {"AWS_SESSION_TOKEN", "tok"},
          {"AWS_REGION", "eu-west-1"},
          {"AWS_ENDPOINT_URL", "http://127.0.0.1:9000/"}};
  Write(".aws/credentials", "[default]\naws_access_key_id = AKIDFILE\naws_secret_access_key = secretfile\n");
  absl::StatusOr<S3Settings> s = Load();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->access_key_id, "AKIDENV");
  EXPECT_EQ(s->secret_access_key, "secretenv");
  EXPECT_EQ(s->session_token, "tok");
  EXPECT_EQ(s->region, "eu-west-1");
  EXPECT_EQ(s->endpoint, "http://127.0.0.1:9000");
  EXPECT_EQ(s->source, "AWS_ACCESS_KEY_ID");
}

TEST_F(Chain, ProfileFromFilesAndConfig) {
  env_ = {{"AWS_PROFILE", "lab"}};
  Write(".aws/credentials",
        "# comment\n[default]\naws_access_key_id=A\naws_secret_access_key=B\n\n[lab]\n"
        "  aws_access_key_id = AKIDLAB  \n  aws_secret_access_key = secretlab\n");
  Write(".aws/config",
        "[default]\nregion = us-west-2\n[profile lab]\nregion = eu-central-1\n"
        "endpoint_url = https://minio.lab:9443\ns3 =\n  addressing_style = path\n");
  absl::StatusOr<S3Settings> s = Load();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->access_key_id, "AKIDLAB");
  EXPECT_EQ(s->secret_access_key, "secretlab");
  EXPECT_EQ(s->region, "eu-central-1");
  EXPECT_EQ(s->endpoint, "https://minio.lab:9443");
  EXPECT_EQ(s->source, (home_ / ".aws/credentials").string() + " [lab]");
}

TEST_F(Chain, VariablesOverFilesAndS3SpecificEndpointFirst) {
  env_ = {{"AWS_DEFAULT_REGION", "ap-south-1"},
          {"AWS_ENDPOINT_URL", "http://a:1"},
          {"AWS_ENDPOINT_URL_S3", "http://b:2"},
          {"AWS_SHARED_CREDENTIALS_FILE", (home_ / "creds").string()},
          {"AWS_CONFIG_FILE", (home_ / "conf").string()}};
  Write("creds", "[default]\naws_access_key_id=K\naws_secret_access_key=S\n");
  Write("conf", "[default]\nregion=us-west-2\nendpoint_url=http://c:3\n");
  absl::StatusOr<S3Settings> s = Load();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->region, "ap-south-1");
  EXPECT_EQ(s->endpoint, "http://b:2");
  EXPECT_EQ(s->access_key_id, "K");
}

TEST_F(Chain, KeysInConfigFileAndDefaultEndpoint) {
  Write(".aws/config", "[default]\naws_access_key_id=K\naws_secret_access_key=S\n");
  absl::StatusOr<S3Settings> s = Load();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->region, "us-east-1");
  EXPECT_EQ(s->endpoint, "https://s3.us-east-1.amazonaws.com");
}

TEST_F(Chain, NodeConfigFileReplacesTheEnvironment) {
  env_ = {{"AWS_ACCESS_KEY_ID", "AKIDENV"}, {"AWS_SECRET_ACCESS_KEY", "secretenv"}};
  Write("daemon-creds", "[default]\naws_access_key_id=AKIDDAEMON\naws_secret_access_key=secretdaemon\n");
  absl::StatusOr<S3Settings> s = Load((home_ / "daemon-creds").string());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->access_key_id, "AKIDDAEMON");
  EXPECT_EQ(Load((home_ / "absent").string()).status().message(),
            (home_ / "absent").string() + ": no such file");
}

TEST_F(Chain, NoCredentials) {
  EXPECT_EQ(Load().status().message(),
            "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or aws_access_key_id and "
            "aws_secret_access_key in profile default of ~/.aws/credentials (AWS_SHARED_CREDENTIALS_FILE)");
}

TEST_F(Chain, HalfAKeyOrAMalformedOneIsRefusedWithoutEchoingIt) {
  env_ = {{"AWS_SECRET_ACCESS_KEY", "top secret value"}};
  absl::Status s = Load().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), Not(HasSubstr("top secret")));
  env_.clear();
  Write(".aws/credentials", "[default]\naws_access_key_id=K\naws_secret_access_key=sec\x01ret\n");
  s = Load().status();
  EXPECT_EQ(s.message(),
            (home_ / ".aws/credentials").string() +
                " [default]: aws_access_key_id and aws_secret_access_key must both be set, printable "
                "ASCII without spaces, at most 4096 bytes (and aws_session_token, if set)");
  Write(".aws/credentials",
        "[default]\naws_access_key_id=K\naws_secret_access_key=" + std::string(5000, 'x') + "\n");
  EXPECT_EQ(Load().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(Chain, HostileFiles) {
  Write(".aws/credentials", "aws_secret_access_key = s3cr3t\n");
  EXPECT_EQ(Load().status().message(),
            (home_ / ".aws/credentials").string() + ":1: a setting before any [section]");
  Write(".aws/credentials", "[default\naws_secret_access_key = s3cr3t\n");
  EXPECT_EQ(Load().status().message(),
            (home_ / ".aws/credentials").string() + ":1: a section header without ']'");
  Write(".aws/credentials", std::string("[default]\nx=\0y\n", 14));
  EXPECT_EQ(Load().status().message(), (home_ / ".aws/credentials").string() + ":2: a NUL byte");
  Write(".aws/credentials", std::string(kMaxAwsFileBytes + 1, '#'));
  EXPECT_EQ(Load().status().message(),
            (home_ / ".aws/credentials").string() + ": not a regular file of at most 1048576 bytes");
  std::filesystem::remove(home_ / ".aws/credentials");
  std::filesystem::create_directories(home_ / ".aws/credentials");  // a folder where a file should be
  EXPECT_EQ(Load().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(Chain, HostileRegionAndEndpoint) {
  env_ = {{"AWS_ACCESS_KEY_ID", "K"}, {"AWS_SECRET_ACCESS_KEY", "S"}, {"AWS_REGION", "us-east-1/../x"}};
  EXPECT_EQ(Load().status().message(),
            "AWS_REGION: a region is letters, digits and '-', at most 64 characters");
  env_["AWS_REGION"] = "us-east-1";
  for (const char* bad : {"ftp://h", "http://user:pw@h", "http://h/path", "http://h:99999", "http://h:0",
                          "http://", "h:80", "http://h?x=1"}) {
    env_["AWS_ENDPOINT_URL"] = bad;
    EXPECT_EQ(
        Load().status().message(),
        "AWS_ENDPOINT_URL: an S3 endpoint is http(s)://host[:port] with no path, user or query (at most 255 "
        "characters)")
        << bad;
  }
  env_["AWS_ENDPOINT_URL"] = "http://[::1]:9000";
  EXPECT_EQ(Load()->endpoint, "http://[::1]:9000");
}

}  // namespace
}  // namespace metaload
