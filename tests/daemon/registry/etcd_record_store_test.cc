// The etcd client and model store against a real etcd (Debian's /usr/bin/etcd, started on
// free loopback ports with a temporary data dir). Skipped when etcd is absent, unless
// METALOAD_REQUIRE_ETCD=1 or CI=true (then it fails).
#include "daemon/registry/etcd/etcd_record_store.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/registry/embedded_record_store.h"
#include "daemon/registry/etcd/etcd_client.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

using ::metaload::testing::FreeLoopbackPort;
using ::metaload::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kEtcd[] = "/usr/bin/etcd";

bool EtcdRequired() {
  const char* require = std::getenv("METALOAD_REQUIRE_ETCD");
  const char* ci = std::getenv("CI");
  return (require != nullptr && std::string(require) == "1") || (ci != nullptr && std::string(ci) == "true");
}

// A one-member etcd; stopped (SIGTERM) by the destructor.
class EtcdServer {
 public:
  explicit EtcdServer(const std::string& data_dir)
      : endpoint_(absl::StrCat("127.0.0.1:", FreeLoopbackPort())) {
    const std::string client = absl::StrCat("http://", endpoint_);
    const std::string peer = absl::StrCat("http://127.0.0.1:", FreeLoopbackPort());
    const std::string cluster = "t=" + peer;
    // This environment less LD_PRELOAD: scripts/setup.sh sanitize/tsan preload their runtime,
    // and etcd (Go) preloaded with TSan's ignores SIGTERM (this destructor then waited forever).
    std::vector<char*> env;
    for (char** var = environ; *var != nullptr; ++var) {
      if (std::strncmp(*var, "LD_PRELOAD=", 11) != 0) env.push_back(*var);
    }
    env.push_back(nullptr);
    const char* argv[] = {kEtcd,
                          "--name",
                          "t",
                          "--data-dir",
                          data_dir.c_str(),
                          "--listen-client-urls",
                          client.c_str(),
                          "--advertise-client-urls",
                          client.c_str(),
                          "--listen-peer-urls",
                          peer.c_str(),
                          "--initial-advertise-peer-urls",
                          peer.c_str(),
                          "--initial-cluster",
                          cluster.c_str(),
                          nullptr};
    pid_ = ::fork();
    if (pid_ == 0) {
      std::freopen("/dev/null", "w", stderr);
      std::freopen("/dev/null", "w", stdout);
      ::execve(kEtcd, const_cast<char**>(argv), env.data());
      ::_exit(127);
    }
  }
  ~EtcdServer() {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  const std::string& endpoint() const { return endpoint_; }
  // True once its client port accepts a TCP connection (within 20 s).
  bool WaitUntilListening() const {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(std::stoi(endpoint_.substr(endpoint_.rfind(':') + 1))));
    for (int i = 0; i < 200; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      const bool connected = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
      ::close(fd);
      if (connected) return true;
      ::usleep(100'000);
    }
    return false;
  }

 private:
  std::string endpoint_;
  pid_t pid_ = -1;
};

class EtcdModelStoreTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kMaxRecordBytes = 64 << 10;

  void SetUp() override {
    if (::access(kEtcd, X_OK) != 0) {
      if (EtcdRequired()) FAIL() << kEtcd << " is absent (Debian package etcd-server; scripts/setup.sh)";
      GTEST_SKIP() << kEtcd << " is absent (Debian package etcd-server; scripts/setup.sh installs it)";
    }
    server_ = std::make_unique<EtcdServer>(dir_.File("etcd"));
    // Connect only once etcd listens: a gRPC channel whose first attempt was refused waits
    // out its reconnect backoff (measured: ~10 s).
    ASSERT_TRUE(server_->WaitUntilListening()) << "etcd at " << server_->endpoint() << " did not start";
    client_ = std::make_unique<EtcdClient>(std::vector<std::string>{server_->endpoint()}, absl::Seconds(2));
    ASSERT_TRUE(client_->Get("/").ok())
        << "etcd at " << server_->endpoint() << " did not start: " << client_->Get("/").status();
    store_ = std::make_unique<EtcdRecordStore>(client_.get(), "/t/", kMaxRecordBytes);
  }

  static v1::ModelRecord Record(const std::string& name, const std::string& dir,
                                const std::string& node = "node-a") {
    v1::ModelRecord record;
    record.set_name(name);
    record.set_checkpoint_dir(dir);
    record.set_registered_on(node);
    return record;
  }

  TempDir dir_;
  std::unique_ptr<EtcdServer> server_;
  std::unique_ptr<EtcdClient> client_;
  std::unique_ptr<EtcdRecordStore> store_;
};

TEST(PrefixRangeEnd, IsTheNextKeyAfterEveryKeyWithThePrefix) {
  EXPECT_EQ(PrefixRangeEnd("/metaload/"), "/metaload0");
  EXPECT_EQ(PrefixRangeEnd("a\xff"), "b");
  EXPECT_EQ(PrefixRangeEnd("\xff"), std::string(1, '\0'));
}

TEST_F(EtcdModelStoreTest, PutGetLoadRemoveRoundTrip) {
  ASSERT_TRUE(store_->Put(Record("m", "/models/m")).ok());
  ASSERT_TRUE(store_->Put(Record("n", "/models/n")).ok());
  auto got = store_->Get("m");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status();
  EXPECT_EQ((*got)->record.checkpoint_dir(), "/models/m");
  EXPECT_EQ((*got)->origin, "etcd key \"/t/models/node-a/m\"");
  auto listing = store_->List();
  ASSERT_TRUE(listing.ok());
  ASSERT_EQ(listing->names.size(), 2u);
  EXPECT_EQ(listing->names.at("m").node, "node-a");
  const int64_t before = listing->names.at("m").mod_revision;
  ASSERT_TRUE(store_->Put(Record("m", "/models/m2")).ok());
  EXPECT_GT(store_->List()->names.at("m").mod_revision, before) << "a rewrite must show in the revision";
  auto loaded = store_->Load();
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->records.size(), 2u);
  EXPECT_EQ(loaded->records[0].record.checkpoint_dir(), "/models/m2");
  ASSERT_TRUE(store_->Remove("m").ok());
  EXPECT_FALSE(store_->Get("m")->has_value());
  EXPECT_TRUE(store_->Remove("m").ok()) << "removing a missing model is not an error";
}

TEST_F(EtcdModelStoreTest, GarbageAMisnamedRecordAndAStrayKeyAreDataLossNamingTheKey) {
  ASSERT_TRUE(client_->Put("/t/models/node-a/junk", std::string("\0garbage", 8)).ok());
  ASSERT_TRUE(client_->Put("/t/models/node-a/alias", EncodeModelFile(Record("real", "/models/r"))).ok());
  // Under node-b's keys, a record saying node-a registered it: forged.
  ASSERT_TRUE(client_->Put("/t/models/node-b/forged", EncodeModelFile(Record("forged", "/models/f"))).ok());
  // The layout before per-node keys: never read.
  ASSERT_TRUE(client_->Put("/t/models/old", EncodeModelFile(Record("old", "/models/o"))).ok());
  auto junk = store_->Get("junk");
  EXPECT_EQ(junk.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(junk.status().message(), HasSubstr("etcd key \"/t/models/node-a/junk\""));
  auto alias = store_->Get("alias");
  EXPECT_EQ(alias.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(alias.status().message(), HasSubstr("holds the record of model \"real\", not of \"alias\""));
  auto forged = store_->Get("forged");
  EXPECT_EQ(forged.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(forged.status().message(),
              HasSubstr("etcd key \"/t/models/node-b/forged\": holds a record registered on node \"node-a\", "
                        "under node \"node-b\"'s keys"));
  EXPECT_FALSE(store_->Get("old")->has_value());
  ASSERT_TRUE(store_->Put(Record("good", "/models/g")).ok());
  auto loaded = store_->Load();
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->records.size(), 1u) << "the good record is still served";
  ASSERT_EQ(loaded->skipped.size(), 4u);
  EXPECT_THAT(loaded->skipped[0].message(),
              HasSubstr("etcd key \"/t/models/old\": not of the layout <prefix>models/<node>/<model>"));
}

TEST_F(EtcdModelStoreTest, TheKeyCreatedFirstHoldsTheNameWhateverTheOthersWrite) {
  EtcdRecordStore b(client_.get(), "/t/", kMaxRecordBytes);  // node-b's daemon
  ASSERT_TRUE(store_->GetForUpdate("m").ok());
  ASSERT_TRUE(store_->Put(Record("m", "/models/a")).ok());
  // node-b writes its own key of the name later (as a peer without roles could, or one racing):
  // node-a's record stays the name's, for every reader, however often node-b rewrites its key.
  const std::string later = EncodeModelFile(Record("m", "/models/b", "node-b"));
  ASSERT_TRUE(client_->Put("/t/models/node-b/m", later).ok());
  ASSERT_TRUE(client_->Put("/t/models/node-b/m", later).ok());
  EXPECT_EQ((*b.Get("m"))->record.checkpoint_dir(), "/models/a");
  EXPECT_EQ(b.List()->names.at("m").key, "/t/models/node-a/m");
  // Two nodes registering one absent name at once: the later key is deleted again, Aborted.
  ASSERT_TRUE(client_->Delete("/t/models/node-b/m").ok());
  ASSERT_TRUE(store_->GetForUpdate("n").ok());
  ASSERT_TRUE(b.GetForUpdate("n").ok());
  ASSERT_TRUE(store_->Put(Record("n", "/models/a")).ok());
  absl::Status second = b.Put(Record("n", "/models/b", "node-b"));
  EXPECT_EQ(second.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(second.message(), HasSubstr("model n was registered on node node-a meanwhile; try again"));
  EXPECT_FALSE(client_->Get("/t/models/node-b/n")->has_value()) << "the later key is deleted";
  // Replaced through node-b having read it (no roles here): node-a's key goes, node-b's holds it.
  ASSERT_TRUE(b.GetForUpdate("n")->has_value());
  ASSERT_TRUE(b.Put(Record("n", "/models/b", "node-b")).ok());
  EXPECT_FALSE(client_->Get("/t/models/node-a/n")->has_value());
  EXPECT_EQ((*store_->Get("n"))->record.registered_on(), "node-b");
}

TEST_F(EtcdModelStoreTest, KeysAreListedInPagesThatFitTheReceiveLimit) {
  // 3 keys of 600 KiB names and 1500 small ones: one answer of them all would be ~1.9 MB, over
  // this client's limit of 1 MiB; pages of fewer keys each fit.
  for (char c : {'a', 'b', 'c'})
    ASSERT_TRUE(client_->Put(absl::StrCat("/t/k/", std::string(600 << 10, c)), "").ok());
  for (int i = 0; i < 1500; ++i) ASSERT_TRUE(client_->Put(absl::StrCat("/t/k/small/", i), "v").ok());
  EtcdClient small(std::vector<std::string>{server_->endpoint()}, absl::Seconds(5), 1 << 20);
  auto keys = small.ListKeys("/t/k/");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 1503u);
  EXPECT_TRUE(keys->front().value().empty()) << "keys only";
}

TEST_F(EtcdModelStoreTest, ARecordAboveTheCapIsNeverWrittenAndNeverDecoded) {
  v1::ModelRecord big = Record("big", "/models/big");
  big.set_skeleton_json(std::string(kMaxRecordBytes, 'x'));
  absl::Status put = store_->Put(big);
  EXPECT_EQ(put.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(put.message(), HasSubstr("above registry_max_record_size (65536 bytes)"));
  EXPECT_FALSE(client_->Get("/t/models/node-a/big")->has_value()) << "nothing written";
  // Written by someone else: refused by its size, before its SHA-256 or protobuf is looked at.
  const std::string encoded = EncodeModelFile(big);
  ASSERT_TRUE(client_->Put("/t/models/node-a/big", encoded).ok());
  auto got = store_->Get("big");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(
      got.status().message(),
      HasSubstr(absl::StrCat("etcd key \"/t/models/node-a/big\": a record of ", encoded.size(),
                             " bytes, above registry_max_record_size (65536 bytes): refused undecoded")));
  ASSERT_TRUE(store_->Put(Record("good", "/models/g")).ok());
  auto loaded = store_->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->records.size(), 1u);
  EXPECT_EQ(loaded->skipped.size(), 1u);
  // Too large for the client to receive: refused as its size is announced, DataLoss all the same.
  EtcdClient small(std::vector<std::string>{server_->endpoint()}, absl::Seconds(2), 32 << 10);
  EtcdRecordStore store(&small, "/t/", kMaxRecordBytes);
  got = store.Get("big");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr("etcd key \"/t/models/node-a/big\": a record above "
                                                "registry_max_record_size (65536 bytes): refused unread"));
  loaded = store.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->skipped.size(), 1u);
}

TEST_F(EtcdModelStoreTest, TwoDaemonsWritingOneNameAtOnceNeverBothSucceed) {
  EtcdRecordStore other(client_.get(), "/t/", kMaxRecordBytes);  // another daemon's store on the same etcd
  ASSERT_TRUE(store_->GetForUpdate("m").ok());
  ASSERT_TRUE(other.GetForUpdate("m").ok());
  ASSERT_TRUE(store_->Put(Record("m", "/models/a")).ok());
  absl::Status second = other.Put(Record("m", "/models/b"));
  EXPECT_EQ(second.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(second.message(),
              HasSubstr("model m was registered or removed on another daemon meanwhile; try again"));
  EXPECT_EQ((*store_->Get("m"))->record.checkpoint_dir(), "/models/a") << "the first write stands";

  auto seen = other.GetForUpdate("m");  // read again, decide again: replace
  ASSERT_TRUE(seen.ok() && seen->has_value());
  ASSERT_TRUE(other.Put(Record("m", "/models/b")).ok());
  absl::Status removed = store_->Remove("m");
  EXPECT_EQ(removed.code(), absl::StatusCode::kAborted)
      << "a removal must not delete a registration it did not see";
  EXPECT_EQ((*other.Get("m"))->record.checkpoint_dir(), "/models/b");
  ASSERT_TRUE(store_->GetForUpdate("m").ok());
  EXPECT_TRUE(store_->Remove("m").ok());
  EXPECT_FALSE(store_->Get("m")->has_value());
}

TEST_F(EtcdModelStoreTest, ARevokedLeaseTakesItsKeysAndCannotBeRenewed) {
  auto lease = client_->GrantLease(5);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(client_->Put("/t/members/a", "x", *lease).ok());
  EXPECT_TRUE(client_->KeepAlive(*lease).ok());
  ASSERT_TRUE(client_->RevokeLease(*lease).ok());
  EXPECT_FALSE(client_->Get("/t/members/a")->has_value());
  EXPECT_EQ(client_->KeepAlive(*lease).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(client_->RevokeLease(*lease).ok()) << "revoking an expired lease is not an error";
}

TEST_F(EtcdModelStoreTest, AnEndpointThatDoesNotAnswerIsPassedOver) {
  const std::string dead = absl::StrCat("127.0.0.1:", FreeLoopbackPort());
  EtcdClient both({dead, server_->endpoint()}, absl::Seconds(2));
  EXPECT_TRUE(both.Put("/t/x", "1").ok());
  EXPECT_EQ(both.Describe(), absl::StrCat("etcd://", dead, ",", server_->endpoint()));
  EtcdClient none({dead}, absl::Seconds(2));
  absl::Status refused = none.Put("/t/x", "1");
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.message(), HasSubstr(absl::StrCat("etcd ", dead, ": Put /t/x")));
}

}  // namespace
}  // namespace metaload
