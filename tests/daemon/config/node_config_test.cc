// Node config: every key, its default, and one test per distinct error.
#include "daemon/config/node_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "daemon/config/self_address.h"
#include "tests/test_support.h"
#include "util/fs/memory_file_system.h"

namespace metaload {
namespace {

using ::metaload::testing::TempDir;

TEST(NodeConfig, DefaultsForEveryOptionalKey) {
  auto config = ParseNodeConfig("node: a\n", "n.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->node, "a");
  EXPECT_EQ(config->listen, "127.0.0.1:7070");
  EXPECT_TRUE(CoordinatorIsSelf(*config, "127.0.0.1:7070", 7070, "h"));
  EXPECT_EQ(config->gpus, 0);
  EXPECT_EQ(config->gpu_memory_bytes, 80ull << 30);
  EXPECT_TRUE(config->roots.empty());
  EXPECT_EQ(config->chunk_bytes, 1u << 20);
  EXPECT_EQ(config->member_timeout, absl::Seconds(10));
  EXPECT_EQ(config->max_streams, 256u);
  EXPECT_EQ(config->max_streams_per_client, 64u);
  EXPECT_EQ(config->max_connections, 1024u);
  EXPECT_EQ(config->max_connections_per_client, 256u);
  EXPECT_EQ(config->max_preauth_connections, 256u);
  EXPECT_EQ(config->max_preauth_connections_per_client, 64u);
  EXPECT_EQ(config->preauth_timeout, absl::Seconds(10));
  EXPECT_EQ(config->max_preauth_bytes, 8u << 20);
  EXPECT_EQ(config->max_request_bytes, 64u << 20);
  EXPECT_EQ(config->idle_stream_timeout, absl::Seconds(60));
  EXPECT_EQ(config->max_models, 256);
  EXPECT_EQ(config->max_tensors_per_model, 1'000'000);
  EXPECT_EQ(config->max_names_per_identity, 4);
}

TEST(NodeConfig, ReadsEveryLimit) {
  auto config = ParseNodeConfig(
      "node: a\nmax_streams: 1000\nmax_streams_per_client: 1000\nmax_connections: 5000\n"
      "max_connections_per_client: 4000\nmax_preauth_connections: 300\nmax_preauth_connections_per_client: "
      "30\n"
      "preauth_timeout: 30s\nmax_preauth_bytes: 16MiB\nmax_request_size: 256MiB\n"
      "idle_stream_timeout: 2m\nmax_models: 1024\nmax_tensors_per_model: 4000000\nmax_names_per_identity: "
      "4096\n",
      "n.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->max_streams, 1000u);
  EXPECT_EQ(config->max_streams_per_client, 1000u);
  EXPECT_EQ(config->max_connections, 5000u);
  EXPECT_EQ(config->max_connections_per_client, 4000u);
  EXPECT_EQ(config->max_preauth_connections, 300u);
  EXPECT_EQ(config->max_preauth_connections_per_client, 30u);
  EXPECT_EQ(config->preauth_timeout, absl::Seconds(30));
  EXPECT_EQ(config->max_preauth_bytes, 16u << 20);
  EXPECT_EQ(config->max_request_bytes, 256u << 20);
  EXPECT_EQ(config->idle_stream_timeout, absl::Minutes(2));
  EXPECT_EQ(config->max_models, 1024);
  EXPECT_EQ(config->max_tensors_per_model, 4'000'000);
  EXPECT_EQ(config->max_names_per_identity, 4096);
}

TEST(NodeConfig, SameDeviceIsOffUnlessAskedFor) {
  auto config = ParseNodeConfig("node: a\n", "n.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->same_device);
  config = ParseNodeConfig("node: a\nsame_device: true\n", "n.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->same_device);
}

TEST(NodeConfig, LogFormatIsTextUnlessJsonIsAskedFor) {
  auto config = ParseNodeConfig("node: a\n", "n.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->log_format, LogFormat::kText);
  config = ParseNodeConfig("node: a\nlog_format: json\n", "n.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->log_format, LogFormat::kJson);
  config = ParseNodeConfig("node: a\nlog_format: text\n", "n.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->log_format, LogFormat::kText);
  for (const char* bad : {"log_format: JSON\n", "log_format: [json]\n", "log_format: \"json\\n\"\n"}) {
    config = ParseNodeConfig(absl::StrCat("node: a\n", bad), "n.yaml");
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ParseNodeConfig("node: a\nlog_format: JSON\n", "n.yaml").status().message(),
            "n.yaml: log_format: \"JSON\" is neither text nor json");
  EXPECT_EQ(ParseNodeConfig("node: a\nlog_format: \"json\\nx\"\n", "n.yaml").status().message(),
            "n.yaml: log_format: \"json\\nx\" is neither text nor json")
      << "a newline in the value is echoed escaped";
}

TEST(NodeConfig, PerClientLimitsDefaultToAtMostTheirTotal) {
  auto config = ParseNodeConfig("node: a\nmax_streams: 8\nmax_connections: 100\n", "n.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->max_streams_per_client, 8u);
  EXPECT_EQ(config->max_connections_per_client, 100u);
}

TEST(NodeConfig, ReadsEveryKeyAndResolvesRoots) {
  TempDir dir;
  auto config = ParseNodeConfig(
      "node: b\nlisten: 0.0.0.0:7071\ncoordinator: 10.0.0.1:7070\ngpus: 8\nallow_insecure: true\n"
      "gpu_memory: 40GiB\nchunk_size: 512KiB\nroots: [" +
          dir.path() + "/.]\n",
      "n.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(CoordinatorIsSelf(*config, "h:7071", 7071, "h"));
  EXPECT_EQ(config->gpus, 8);
  EXPECT_EQ(config->gpu_memory_bytes, 40ull << 30);
  EXPECT_EQ(config->chunk_bytes, 512u << 10);
  ASSERT_EQ(config->roots.size(), 1u);
  EXPECT_EQ(config->roots[0], dir.path());  // canonical: "/." removed
}

// A root on another storage back end (util/fs/file_system.h) is kept in its normal form, so that
// registrations and served files compare with it exactly, as with a canonical folder.
TEST(NodeConfig, ARootOfAServedSchemeIsKeptInNormalForm) {
  RegisteredMemoryFileSystem().Put("mem://config-bucket/models/m/model.safetensors", "x");
  auto config = ParseNodeConfig("node: a\nroots: [mem://config-bucket/./models/]\n", "n.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->roots, ::testing::ElementsAre("mem://config-bucket/models"));
  auto missing = ParseNodeConfig("node: a\nroots: [mem://config-bucket/none]\n", "n.yaml");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "n.yaml: roots: \"mem://config-bucket/none\" does not exist");
}

TEST(NodeConfig, AdvertisedAddressNeverAWildcard) {
  auto config = ParseNodeConfig("node: a\nlisten: 0.0.0.0:7070\nallow_insecure: true\n", "n.yaml");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(AdvertisedAddress(*config, 7070, "gpu-node-01"), "gpu-node-01:7070");
  config = ParseNodeConfig("node: a\nlisten: 127.0.0.1:0\n", "n.yaml");
  EXPECT_EQ(AdvertisedAddress(*config, 41234, "h"), "127.0.0.1:41234");
  config = ParseNodeConfig("node: a\nlisten: 0.0.0.0:7070\nadvertise: 10.1.2.3:7070\nallow_insecure: true\n",
                           "n.yaml");
  EXPECT_EQ(AdvertisedAddress(*config, 7070, "h"), "10.1.2.3:7070");
  EXPECT_EQ(ParseNodeConfig("node: a\nadvertise: nohost\n", "n.yaml").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NodeConfig, CoordinatorEqualToListenMeansSelf) {
  auto config = ParseNodeConfig("node: a\nlisten: 127.0.0.1:7000\ncoordinator: 127.0.0.1:7000\n", "n.yaml");
  ASSERT_TRUE(config.ok());
  EXPECT_TRUE(CoordinatorIsSelf(*config, "127.0.0.1:7000", 7000, "h"));
}

// deploy/node.example.yaml's pattern: listen on the wildcard, name the coordinator by this
// host's name (or localhost, or an address of this host) and the same port.
TEST(NodeConfig, CoordinatorNamedByThisHostsNameLocalhostOrAddressIsSelf) {
  char hostname[256] = {0};
  ASSERT_EQ(::gethostname(hostname, sizeof(hostname) - 1), 0);
  for (const std::string& coordinator : {std::string(hostname) + ":7070", std::string("localhost:7070"),
                                         std::string("127.0.0.1:7070"), std::string("LOCALHOST:7070")}) {
    auto config = ParseNodeConfig(
        "node: a\nlisten: 0.0.0.0:7070\nallow_insecure: true\ncoordinator: " + coordinator + "\n", "n.yaml");
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_TRUE(CoordinatorIsSelf(*config, std::string(hostname) + ":7070", 7070, hostname)) << coordinator;
  }
}

TEST(NodeConfig, CoordinatorOnAnotherPortOrHostIsNotSelf) {
  // Two daemons on one machine: the other's port.
  auto config = ParseNodeConfig("node: b\nlisten: 127.0.0.1:0\ncoordinator: 127.0.0.1:7070\n", "n.yaml");
  ASSERT_TRUE(config.ok());
  EXPECT_FALSE(CoordinatorIsSelf(*config, "127.0.0.1:41000", 41000, "h"));
  config = ParseNodeConfig(
      "node: b\nlisten: 0.0.0.0:7070\nallow_insecure: true\ncoordinator: no-such-host.invalid:7070\n",
      "n.yaml");
  ASSERT_TRUE(config.ok());
  EXPECT_FALSE(CoordinatorIsSelf(*config, "h:7070", 7070, "h"));
}

TEST(NodeConfig, ReadsMemberTimeout) {
  auto config = ParseNodeConfig("node: a\nmember_timeout: 30s\n", "n.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->member_timeout, absl::Seconds(30));
}

TEST(NodeConfig, ShutdownGraceDefaultsTo30sAndMayBeZero) {
  auto config = ParseNodeConfig("node: a\n", "n.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->shutdown_grace, absl::Seconds(30));
  config = ParseNodeConfig("node: a\nshutdown_grace: 0s\n", "n.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->shutdown_grace, absl::ZeroDuration());
  config = ParseNodeConfig("node: a\nshutdown_grace: 1m30s\n", "n.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->shutdown_grace, absl::Seconds(90));
}

TEST(NodeConfig, ReadsStateDirWhichNeedNotExistYet) {
  auto config = ParseNodeConfig("node: a\nstate_dir: /no/such/dir/yet\n", "n.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->state_dir, "/no/such/dir/yet");
  EXPECT_EQ(ParseNodeConfig("node: a\n", "n.yaml")->state_dir, "") << "default: memory only";
}

struct BadConfig {
  const char* name;
  const char* yaml;
  absl::StatusCode code;
  const char* message;
};

class NodeConfigErrors : public ::testing::TestWithParam<BadConfig> {};

TEST_P(NodeConfigErrors, NamesFileKeyAndProblem) {
  auto config = ParseNodeConfig(GetParam().yaml, "n.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), GetParam().code);
  EXPECT_NE(config.status().message().find(GetParam().message), absl::string_view::npos) << config.status();
}

INSTANTIATE_TEST_SUITE_P(
    All, NodeConfigErrors,
    ::testing::Values(
        BadConfig{"NotYaml", "node: [a", absl::StatusCode::kInvalidArgument, "n.yaml: not valid YAML"},
        BadConfig{"NotAMap", "- a\n- b\n", absl::StatusCode::kInvalidArgument, "must be a YAML mapping"},
        BadConfig{"UnknownKey", "node: a\ngpu: 8\n", absl::StatusCode::kInvalidArgument,
                  "n.yaml: gpu: unknown key"},
        // fuzz/node_config_fuzz.cc: a complex key ("? ...") threw YAML::TypedBadConversion out
        // of ParseNodeConfig and terminated metad; the first case is the fuzzer's input.
        BadConfig{"ComplexKeyFoundByFuzzer",
                  "? NULnd-e0~lnode: gpu-node-01\n\ngpu_memory: 80GiB\nrinoots:\n d\n",
                  absl::StatusCode::kInvalidArgument, "n.yaml: a key must be a plain name"},
        BadConfig{"ListKey", "node: a\n[gpus, 8]: 1\n", absl::StatusCode::kInvalidArgument,
                  "n.yaml: a key must be a plain name"},
        BadConfig{"MissingNode", "gpus: 8\n", absl::StatusCode::kInvalidArgument, "n.yaml: node: required"},
        BadConfig{"EmptyNode", "node: ''\n", absl::StatusCode::kInvalidArgument, "node: must not be empty"},
        BadConfig{"NodeNameWithSpace", "node: 'gpu node'\n", absl::StatusCode::kInvalidArgument,
                  "node: the name \"gpu node\" may hold only letters"},
        BadConfig{"MemberTimeoutBad", "node: a\nmember_timeout: 0.1s\n", absl::StatusCode::kInvalidArgument,
                  "member_timeout: \"0.1s\" is not a duration from 1s to 1h"},
        BadConfig{"ShutdownGraceNegative", "node: a\nshutdown_grace: -1s\n",
                  absl::StatusCode::kInvalidArgument,
                  "shutdown_grace: \"-1s\" is not a duration from 0 to 1h"},
        BadConfig{"ShutdownGraceHuge", "node: a\nshutdown_grace: 9999999999999h\n",
                  absl::StatusCode::kInvalidArgument, "shutdown_grace: \"9999999999999h\" is not a duration"},
        BadConfig{"ShutdownGraceNoUnit", "node: a\nshutdown_grace: 30\n", absl::StatusCode::kInvalidArgument,
                  "shutdown_grace: \"30\" is not a duration"},
        BadConfig{"SameDeviceNotABool", "node: a\nsame_device: yes-please\n",
                  absl::StatusCode::kInvalidArgument, "same_device: \"yes-please\" is not true or false"},
        BadConfig{"StateDirRelative", "node: a\nstate_dir: state\n", absl::StatusCode::kInvalidArgument,
                  "state_dir: \"state\" must be an absolute path"},
        BadConfig{"StateDirList", "node: a\nstate_dir: [/a]\n", absl::StatusCode::kInvalidArgument,
                  "state_dir: must be a single value"},
        BadConfig{"ListenNoPort", "node: a\nlisten: localhost\n", absl::StatusCode::kInvalidArgument,
                  "listen: \"localhost\" is not host:port"},
        BadConfig{"ListenBadPort", "node: a\nlisten: h:99999\n", absl::StatusCode::kInvalidArgument,
                  "listen: bad port \"99999\""},
        BadConfig{"CoordinatorBad", "node: a\ncoordinator: h:x\n", absl::StatusCode::kInvalidArgument,
                  "coordinator: bad port"},
        BadConfig{"GpusNegative", "node: a\ngpus: -1\n", absl::StatusCode::kInvalidArgument,
                  "gpus: \"-1\" is not a count"},
        BadConfig{"GpusText", "node: a\ngpus: eight\n", absl::StatusCode::kInvalidArgument,
                  "gpus: \"eight\""},
        BadConfig{"GpuMemoryBad", "node: a\ngpu_memory: 80 gigs\n", absl::StatusCode::kInvalidArgument,
                  "gpu_memory: bad size"},
        BadConfig{"ChunkTooBig", "node: a\nchunk_size: 8MiB\n", absl::StatusCode::kInvalidArgument,
                  "chunk_size: 8MiB is outside 4KiB..3MiB"},
        BadConfig{"MaxStreamsZero", "node: a\nmax_streams: 0\n", absl::StatusCode::kInvalidArgument,
                  "max_streams: \"0\" is not a count from 1 to 65536"},
        BadConfig{"MaxStreamsText", "node: a\nmax_streams: many\n", absl::StatusCode::kInvalidArgument,
                  "max_streams: \"many\" is not a count"},
        BadConfig{"MaxStreamsHuge", "node: a\nmax_streams: 99999999999999999999\n",
                  absl::StatusCode::kInvalidArgument, "max_streams: \"99999999999999999999\" is not a count"},
        BadConfig{"MaxStreamsPerClientAboveMaxStreams",
                  "node: a\nmax_streams: 8\nmax_streams_per_client: 9\n", absl::StatusCode::kInvalidArgument,
                  "max_streams_per_client: 9 is more than max_streams (8)"},
        BadConfig{"MaxConnectionsZero", "node: a\nmax_connections: 0\n", absl::StatusCode::kInvalidArgument,
                  "max_connections: \"0\" is not a count from 1 to 65536"},
        BadConfig{"MaxConnectionsPerClientTooMany", "node: a\nmax_connections_per_client: 65537\n",
                  absl::StatusCode::kInvalidArgument,
                  "max_connections_per_client: \"65537\" is not a count from 1 to 65536"},
        BadConfig{"MaxConnectionsPerClientAboveMaxConnections",
                  "node: a\nmax_connections: 8\nmax_connections_per_client: 9\n",
                  absl::StatusCode::kInvalidArgument,
                  "max_connections_per_client: 9 is more than max_connections (8)"},
        BadConfig{"MaxPreauthBytesTooSmall", "node: a\nmax_preauth_bytes: 1023KiB\n",
                  absl::StatusCode::kInvalidArgument, "max_preauth_bytes: 1023KiB is outside 1MiB..1GiB"},
        BadConfig{"MaxPreauthBytesTooLarge", "node: a\nmax_preauth_bytes: 18446744073709551615\n",
                  absl::StatusCode::kInvalidArgument,
                  "max_preauth_bytes: 18446744073709551615 is outside 1MiB..1GiB"},
        BadConfig{"MaxRequestSizeTooSmall", "node: a\nmax_request_size: 64KiB\n",
                  absl::StatusCode::kInvalidArgument, "max_request_size: 64KiB is outside 1MiB..1GiB"},
        BadConfig{"MaxRequestSizeTooLarge", "node: a\nmax_request_size: 2GiB\n",
                  absl::StatusCode::kInvalidArgument, "max_request_size: 2GiB is outside 1MiB..1GiB"},
        BadConfig{"MaxRequestSizeBad", "node: a\nmax_request_size: lots\n",
                  absl::StatusCode::kInvalidArgument, "max_request_size: bad size"},
        BadConfig{"IdleStreamTimeoutTooShort", "node: a\nidle_stream_timeout: 100ms\n",
                  absl::StatusCode::kInvalidArgument,
                  "idle_stream_timeout: \"100ms\" is not a duration from 1s to 1h"},
        BadConfig{"MaxModelsAboveHardCap", "node: a\nmax_models: 1025\n", absl::StatusCode::kInvalidArgument,
                  "max_models: \"1025\" is not a count from 1 to 1024"},
        BadConfig{"MaxTensorsPerModelZero", "node: a\nmax_tensors_per_model: 0\n",
                  absl::StatusCode::kInvalidArgument,
                  "max_tensors_per_model: \"0\" is not a count from 1 to 4000000"},
        BadConfig{"MaxNamesPerIdentityAboveTheTable", "node: a\nmax_names_per_identity: 4097\n",
                  absl::StatusCode::kInvalidArgument,
                  "max_names_per_identity: \"4097\" is not a count from 1 to 4096"},
        // Issue 35: a token file's name is its holder's identity, kept in state_dir; "node b.token"
        // made a binding that was not read back at restart.
        BadConfig{
            "TokenFileNameWithASpace", "node: a\nauth_tokens: {member: \"/t/node b.token\"}\n",
            absl::StatusCode::kInvalidArgument,
            "n.yaml: auth_tokens.member: \"/t/node b.token\": its file name \"node b.token\" may hold only "
            "printable ASCII characters other than space, '\"' and '\\' (it names the token's holder, "
            "token:<role>:<file name>, in logs and in state_dir): rename the file"},
        BadConfig{"TokenFileNameWithAControlByte",
                  "node: a\nauth_tokens: {admin: [/t/ops.token, \"/t/\\e[2J\"]}\n",
                  absl::StatusCode::kInvalidArgument, "auth_tokens.admin: \"/t/\\x1b[2J\": its file name"},
        BadConfig{"TokenFileNameEmpty", "node: a\nauth_tokens: {reader: /t/}\n",
                  absl::StatusCode::kInvalidArgument,
                  "auth_tokens.reader: \"/t/\": its file name \"\" must have 1 to 384 characters"},
        BadConfig{"TokenFileNameNotAscii", "node: a\nauth_tokens: {member: \"/t/n\\xf6de.token\"}\n",
                  absl::StatusCode::kInvalidArgument, "its file name \"n\\xc3\\xb6de.token\" may hold only"},
        BadConfig{"NodeCertificateWithASpace",
                  "node: a\ntls: {cert: /c, key: /k, client_ca: /ca, node_certificate: \"metad {node}\"}\n",
                  absl::StatusCode::kInvalidArgument,
                  "n.yaml: tls.node_certificate: the pattern \"metad {node}\" may hold only printable ASCII"},
        BadConfig{"RootsNotList", "node: a\nroots: /models\n", absl::StatusCode::kInvalidArgument,
                  "roots: must be a list"},
        BadConfig{"RootRelative", "node: a\nroots: [models]\n", absl::StatusCode::kInvalidArgument,
                  "must be an absolute path"},
        BadConfig{"RootMissing", "node: a\nroots: [/no/such/folder]\n", absl::StatusCode::kNotFound,
                  "roots: \"/no/such/folder\" does not exist"},
        BadConfig{"RootAFile", "node: a\nroots: [/etc/passwd]\n", absl::StatusCode::kInvalidArgument,
                  "n.yaml: roots: \"/etc/passwd\" is not a folder"},
        BadConfig{"RootOfAnUnservedScheme", "node: a\nroots: [nosuch://bucket/models]\n",
                  absl::StatusCode::kInvalidArgument,
                  "n.yaml: roots: nosuch://bucket/models: no storage back end for nosuch:// locations in "
                  "this build"},
        BadConfig{"S3CredentialsFileRelative", "node: a\ns3_credentials_file: creds\n",
                  absl::StatusCode::kInvalidArgument,
                  "n.yaml: s3_credentials_file: \"creds\" must be an absolute path of at most"},
        BadConfig{"S3CredentialsFileMissing", "node: a\ns3_credentials_file: /nonexistent/creds\n",
                  absl::StatusCode::kInvalidArgument,
                  "n.yaml: s3_credentials_file: /nonexistent/creds: no such file"},
        BadConfig{"S3CredentialsFileNotAFile", "node: a\ns3_credentials_file: /dev/null\n",
                  absl::StatusCode::kInvalidArgument,
                  "n.yaml: s3_credentials_file: /dev/null: not a regular file of at most 1048576 bytes"},
        BadConfig{"RegistryNotEtcd", "node: a\nregistry: zk://h:2181\n", absl::StatusCode::kInvalidArgument,
                  "registry: \"zk://h:2181\" is not etcd://host:port[,host:port...]"},
        BadConfig{"RegistryNoEndpoint", "node: a\nregistry: etcd://\n", absl::StatusCode::kInvalidArgument,
                  "registry: \"etcd://\" is not etcd://host:port"},
        BadConfig{"RegistryEmptyEndpoint", "node: a\nregistry: etcd://h:2379,\n",
                  absl::StatusCode::kInvalidArgument, "registry: an empty endpoint in \"etcd://h:2379,\""},
        BadConfig{"RegistryNoPort", "node: a\nregistry: etcd://h\n", absl::StatusCode::kInvalidArgument,
                  "registry: \"h\" is not host:port"},
        BadConfig{"RegistryBadPort", "node: a\nregistry: etcd://h:99999\n",
                  absl::StatusCode::kInvalidArgument, "registry: bad port \"99999\""},
        BadConfig{"RegistryPortZero", "node: a\nregistry: etcd://h:0\n", absl::StatusCode::kInvalidArgument,
                  "registry: port 0 in \"h:0\" is not etcd's port"},
        BadConfig{"RegistryWithCoordinator", "node: a\nregistry: etcd://h:2379\ncoordinator: h:7070\n",
                  absl::StatusCode::kInvalidArgument,
                  "coordinator: not with `registry`: with etcd every daemon is a peer"},
        BadConfig{"RegistryWithStateDir", "node: a\nregistry: etcd://h:2379\nstate_dir: /var/lib/m\n",
                  absl::StatusCode::kInvalidArgument,
                  "state_dir: not with `registry`: etcd holds the registered models"},
        BadConfig{"RegistryPrefixWithoutRegistry", "node: a\nregistry_prefix: /x/\n",
                  absl::StatusCode::kInvalidArgument, "registry_prefix: needs `registry: etcd://host:port`"},
        BadConfig{"RegistryMaxRecordSizeWithoutRegistry", "node: a\nregistry_max_record_size: 2MiB\n",
                  absl::StatusCode::kInvalidArgument,
                  "registry_max_record_size: needs `registry: etcd://host:port`"},
        BadConfig{"RegistryMaxRecordSizeTooSmall",
                  "node: a\nregistry: etcd://h:2379\nregistry_max_record_size: 1KiB\n",
                  absl::StatusCode::kInvalidArgument,
                  "registry_max_record_size: 1KiB is outside 64KiB..1GiB"},
        BadConfig{"RegistryTlsWithoutCa",
                  "node: a\nregistry: etcd://h:2379\nregistry_tls: {cert: /c, key: /k}\n",
                  absl::StatusCode::kInvalidArgument, "registry_tls: needs ca"},
        BadConfig{"RegistryTlsCertWithoutKey",
                  "node: a\nregistry: etcd://h:2379\nregistry_tls: {ca: /a, cert: /c}\n",
                  absl::StatusCode::kInvalidArgument, "registry_tls: needs both cert and key, or neither"},
        BadConfig{"RegistryTlsUnknownKey",
                  "node: a\nregistry: etcd://h:2379\nregistry_tls: {ca: /a, client_ca: /c}\n",
                  absl::StatusCode::kInvalidArgument,
                  "registry_tls: \"client_ca\": unknown key (known: ca, cert, key)"},
        BadConfig{"RegistryAuthWithoutPasswordFile",
                  "node: a\nregistry: etcd://h:2379\nregistry_auth: {user: metad}\n",
                  absl::StatusCode::kInvalidArgument,
                  "registry_auth: must be a mapping: {user: NAME, password_file: FILE}"},
        BadConfig{"RegistryAuthRelativePasswordFile",
                  "node: a\nregistry: etcd://h:2379\nregistry_auth: {user: metad, password_file: pw}\n",
                  absl::StatusCode::kInvalidArgument,
                  "registry_auth.password_file: \"pw\" must be an absolute path"},
        BadConfig{"RegistryPrefixNoTrailingSlash", "node: a\nregistry: etcd://h:2379\nregistry_prefix: /x\n",
                  absl::StatusCode::kInvalidArgument, "registry_prefix: \"/x\" must start and end with '/'"},
        BadConfig{"RegistryPrefixSpace", "node: a\nregistry: etcd://h:2379\nregistry_prefix: \"/a b/\"\n",
                  absl::StatusCode::kInvalidArgument,
                  "registry_prefix: \"/a b/\" must start and end with '/'"}),
    [](const ::testing::TestParamInfo<BadConfig>& info) { return std::string(info.param.name); });

TEST(NodeConfig, RegistryReadsEveryEtcdEndpointAndThePrefix) {
  auto config = ParseNodeConfig(
      "node: a\nallow_insecure: true\nregistry: etcd://10.0.0.5:2379,etcd-2:2379,[::1]:2379\n"
      "registry_prefix: /prod/metaload/\nregistry_max_record_size: 8MiB\n"
      "registry_auth: {user: metad, password_file: /etc/metaload/etcd.password}\n",
      "n.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->registry_endpoints,
            (std::vector<std::string>{"10.0.0.5:2379", "etcd-2:2379", "[::1]:2379"}));
  EXPECT_EQ(config->registry_prefix, "/prod/metaload/");
  EXPECT_EQ(config->registry_max_record_bytes, 8u << 20);
  EXPECT_EQ(config->registry_auth_user, "metad");
  EXPECT_EQ(config->registry_auth_password_file, "/etc/metaload/etcd.password");
}

TEST(NodeConfig, RegistryDefaultsToTheCoordinatorsOwnAndPrefixMetaload) {
  auto config = ParseNodeConfig("node: a\n", "n.yaml");
  ASSERT_TRUE(config.ok());
  EXPECT_TRUE(config->registry_endpoints.empty());
  config = ParseNodeConfig("node: a\nregistry: etcd://127.0.0.1:2379\n", "n.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->registry_prefix, "/metaload/");
  EXPECT_EQ(config->registry_max_record_bytes, 1u << 20);
}

TEST(NodeConfig, MissingFileIsNotFoundAndSaysWhy) {
  auto config = LoadNodeConfig("/no/such/node.yaml");
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(config.status().message(),
            "node config: cannot open /no/such/node.yaml: No such file or directory");
}

// Plaintext only on loopback unless asked for (docs/security.md); a name that merely starts
// with "127." is not loopback.
TEST(NodeConfig, PlaintextOffLoopbackNeedsTlsOrAllowInsecure) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:7070"));
  EXPECT_TRUE(IsLoopbackAddress("127.8.9.10:1"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:7070"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:7070"));
  EXPECT_FALSE(IsLoopbackAddress("127.evil.example:7070"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:7070"));
  EXPECT_FALSE(IsLoopbackAddress("[::]:7070"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1:7070"));
  auto refused = ParseNodeConfig("node: a\nlisten: 127.evil.example:7070\n", "n.yaml");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(refused.status().message()),
      ::testing::HasSubstr("listen: 127.evil.example:7070 is not a loopback address, and there is no `tls`"));
  refused = ParseNodeConfig("node: a\nregistry: etcd://10.0.0.5:2379\ntls: {cert: /c, key: /k}\n", "n.yaml");
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr("registry: 10.0.0.5:2379 is not a loopback address, and there is no "
                                   "`registry_tls`"));
  // With registry_tls, etcd off loopback is dialed over TLS, whether or not `tls` is set.
  for (const char* tls : {"tls: {cert: /c, key: /k, client_ca: /ca}\n", ""}) {
    auto etcd_tls =
        ParseNodeConfig(absl::StrCat("node: a\nregistry: etcd://10.0.0.5:2379\n", tls,
                                     "registry_tls: {ca: /e/ca.pem, cert: /e/a.pem, key: /e/a.key}\n"),
                        "n.yaml");
    ASSERT_TRUE(etcd_tls.ok()) << etcd_tls.status();
    EXPECT_EQ(etcd_tls->registry_tls_ca, "/e/ca.pem");
    EXPECT_EQ(etcd_tls->registry_tls_cert, "/e/a.pem");
    EXPECT_EQ(etcd_tls->registry_tls_key, "/e/a.key");
  }
  auto config = ParseNodeConfig(
      "node: a\nlisten: 0.0.0.0:7070\ntls: {cert: /c.pem, key: /k.pem, client_ca: /ca.pem}\n"
      "auth_token_file: /t\n",
      "n.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->tls_cert, "/c.pem");
  EXPECT_EQ(config->tls_key, "/k.pem");
  EXPECT_EQ(config->tls_client_ca, "/ca.pem");
  EXPECT_EQ(config->auth_token_file, "/t");
  EXPECT_FALSE(config->allow_insecure);
}

}  // namespace
}  // namespace metaload
