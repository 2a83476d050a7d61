// The registered models: a name is not replaced by accident, the same registration made anew
// refreshes it, every change is persisted once (and a failed write changes nothing), and what
// comes from the store or another peer is not written back (issues 9 and 12).
#include "daemon/registry/model_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/daemon/model_records.h"
#include "util/fs/memory_file_system.h"

namespace metaload {
namespace {

using ::metaload::testing::Plain;
using ::metaload::testing::StatedModel;
using ::metaload::testing::TiedModel;

ModelRecord Record(const std::string& dir = "/models/m") { return Plain(TiedModel(dir)); }

// TiedModel registered on `node` with every tensor's digest.
v1::ModelRecord Digested(const std::string& node = "a") {
  v1::ModelRecord record = TiedModel();
  record.set_registered_on(node);
  for (int i = 0; i < record.tensors_size(); ++i) testing::SetFakeDigest(record.mutable_tensors(i), 10 * i);
  return record;
}

// A store that records what it was asked to write, and fails when told to.
class FakeStore : public RecordStore {
 public:
  absl::StatusOr<StoredModels> Load() override { return StoredModels{}; }
  absl::Status Put(const v1::ModelRecord& record) override {
    if (!fail_with.ok()) return fail_with;
    puts.push_back(record.checkpoint_dir());
    return absl::OkStatus();
  }
  absl::Status Remove(const std::string& name) override {
    if (!fail_with.ok()) return fail_with;
    removes.push_back(name);
    return absl::OkStatus();
  }
  std::string Describe() const override { return "state_dir /fake"; }

  absl::Status fail_with = absl::OkStatus();
  std::vector<std::string> puts;
  std::vector<std::string> removes;
};

class ModelRegistryTest : public ::testing::Test {
 protected:
  std::string DirOf(const std::string& name) const {
    absl::StatusOr<std::shared_ptr<const RegisteredModel>> found = registry_.Find(name);
    return found.ok() ? (*found)->record.checkpoint.dir : std::string(found.status().message());
  }

  ModelRegistry registry_{ModelRegistry::Options{}};
};

// `metactl register --refresh`, or the same registration after a file was rewritten in place:
// the new file stats replace the old (or none, from a record older than them) without
// --replace (docs/integrity.md).
TEST_F(ModelRegistryTest, TheSameRegistrationWithFilesStatedAnewReplacesTheStats) {
  ASSERT_TRUE(registry_.Put(Record(), RecordOrigin::kRegister).ok());  // no stats: unchecked
  const v1::ModelRecord stated = StatedModel();
  ASSERT_TRUE(registry_.Put(Plain(stated), RecordOrigin::kRegister).ok()) << "a refresh needs no --replace";
  absl::StatusOr<std::shared_ptr<const RegisteredModel>> found = registry_.Find("m");
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_EQ((*found)->record.file_stats.size(), 3u);
  EXPECT_EQ((*found)->record.file_stats[1].file, "model-1.safetensors");
  EXPECT_EQ((*found)->record.file_stats[1].stamp.size_bytes, 1001u);
  EXPECT_EQ((*found)->record.file_stats[1].stamp.mtime_ns, 1796054400000000001);
  EXPECT_TRUE(registry_.Put(Plain(stated), RecordOrigin::kPublish).ok()) << "the same again is idempotent";
  v1::ModelRecord elsewhere = stated;
  elsewhere.set_checkpoint_dir("/models/other");
  EXPECT_EQ(registry_.Put(Plain(elsewhere), RecordOrigin::kRegister).code(), absl::StatusCode::kAlreadyExists)
      << "another checkpoint still needs --replace";
}

TEST_F(ModelRegistryTest, RegisteringANameAgainWithAnotherCheckpointNeedsReplace) {
  ASSERT_TRUE(registry_.Put(Record(), RecordOrigin::kRegister).ok());
  EXPECT_TRUE(registry_.Put(Record(), RecordOrigin::kRegister).ok())
      << "the same registration again is accepted";
  absl::Status again = registry_.Put(Record("/models/other"), RecordOrigin::kPublish);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(again.message().find("is already registered from /models/m"), absl::string_view::npos) << again;
  EXPECT_NE(again.message().find("pass --replace"), absl::string_view::npos) << again;
  EXPECT_TRUE(registry_.Put(Record("/models/other"), RecordOrigin::kRegister, /*replace=*/true).ok());
  EXPECT_EQ(DirOf("m"), "/models/other");
}

TEST_F(ModelRegistryTest, UnregisteredModelsAreGone) {
  ASSERT_TRUE(registry_.Put(Record(), RecordOrigin::kRegister).ok());
  ASSERT_TRUE(registry_.Remove("m").ok());
  EXPECT_EQ(registry_.Find("m").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry_.ServedRangesOf("m").status().code(), absl::StatusCode::kNotFound);
  absl::Status again = registry_.Remove("m");
  EXPECT_EQ(again.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(again.message(), ::testing::HasSubstr("(registered: none)"));
}

TEST_F(ModelRegistryTest, LimitsOfTheNodeConfigBoundEveryOrigin) {
  ModelRegistry small(ModelRegistry::Options{.max_models = 1, .max_tensors_per_model = 2});
  absl::Status big = small.Put(Record(), RecordOrigin::kRegister);
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(big.message(), ::testing::HasSubstr("max_tensors_per_model in its node config"));
  ModelRegistry one(ModelRegistry::Options{.max_models = 1});
  ASSERT_TRUE(one.Put(Record(), RecordOrigin::kRegister).ok());
  v1::ModelRecord other = TiedModel();
  other.set_name("n");
  absl::Status full = one.Put(Plain(other), RecordOrigin::kPublish);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), ::testing::HasSubstr("max_models in its node config"));
  // Issue 23: a record forged in etcd or a state_dir file counts like a registration.
  for (RecordOrigin origin : {RecordOrigin::kSharedRegistry, RecordOrigin::kRestore}) {
    absl::Status shared = one.Put(Plain(other), origin);
    EXPECT_EQ(shared.code(), absl::StatusCode::kResourceExhausted) << shared;
    EXPECT_THAT(shared.message(), ::testing::HasSubstr("max_models in its node config"));
    absl::Status wide = small.Put(Record(), origin);
    EXPECT_EQ(wide.code(), absl::StatusCode::kResourceExhausted) << wide;
    EXPECT_THAT(wide.message(), ::testing::HasSubstr("max_tensors_per_model in its node config"));
  }
  EXPECT_THAT(one.Names(), ::testing::ElementsAre("m"));
  EXPECT_TRUE(small.Names().empty());
}

TEST_F(ModelRegistryTest, RegistrationsArePersistedOnceAndAFailedWriteChangesNothing) {
  FakeStore store;
  registry_.AttachStore(&store);
  ASSERT_TRUE(registry_.Put(Record("/models/m"), RecordOrigin::kRegister).ok());
  ASSERT_TRUE(registry_.Put(Record("/models/m"), RecordOrigin::kPublish).ok());
  EXPECT_THAT(store.puts, ::testing::ElementsAre("/models/m")) << "the same record again is not rewritten";

  store.fail_with = absl::ResourceExhaustedError("writing /fake/models/m.pb.tmp: No space left on device");
  absl::Status replaced = registry_.Put(Record("/models/other"), RecordOrigin::kRegister, /*replace=*/true);
  EXPECT_EQ(replaced.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(replaced.message(),
              ::testing::HasSubstr("model m not registered: persisting it in state_dir /fake"));
  EXPECT_THAT(replaced.message(), ::testing::HasSubstr("No space left"));
  ASSERT_EQ(registry_.Models().size(), 1u);
  EXPECT_EQ(DirOf("m"), "/models/m") << "memory changed although the write failed";

  absl::Status removed = registry_.Remove("m");
  EXPECT_EQ(removed.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(registry_.Models().size(), 1u) << "unregistered in memory although the removal was not persisted";
  store.fail_with = absl::OkStatus();
  ASSERT_TRUE(registry_.Remove("m").ok());
  EXPECT_THAT(store.removes, ::testing::ElementsAre("m"));
  EXPECT_TRUE(registry_.Models().empty());
}

TEST_F(ModelRegistryTest, RestoredModelsAreNotWrittenBackAndDoNotReplace) {
  FakeStore store;
  ASSERT_TRUE(registry_.Put(Record("/models/m"), RecordOrigin::kRestore).ok());
  registry_.AttachStore(&store);
  EXPECT_EQ(registry_.Put(Record("/models/other"), RecordOrigin::kRestore, /*replace=*/true).code(),
            absl::StatusCode::kAlreadyExists)
      << "a restored record never replaces";
  EXPECT_TRUE(store.puts.empty());
  EXPECT_EQ(registry_.Models().size(), 1u);
}

TEST_F(ModelRegistryTest, RecordsFromTheSharedRegistryReplaceWithoutWritingAndTheSameOneKeepsItsVersion) {
  FakeStore store;
  registry_.AttachStore(&store);
  ASSERT_TRUE(registry_.Put(Record("/models/m"), RecordOrigin::kSharedRegistry).ok());
  const uint64_t version = (*registry_.Find("m"))->version;
  ASSERT_TRUE(registry_.Put(Record("/models/m"), RecordOrigin::kSharedRegistry).ok());
  EXPECT_EQ((*registry_.Find("m"))->version, version) << "the same record again must not invalidate plans";
  ASSERT_TRUE(registry_.Put(Record("/models/other"), RecordOrigin::kSharedRegistry).ok())
      << "another peer replaced it";
  EXPECT_EQ(DirOf("m"), "/models/other");
  EXPECT_NE((*registry_.Find("m"))->version, version);
  EXPECT_TRUE(registry_.Drop("m"));
  EXPECT_FALSE(registry_.Drop("m"));
  EXPECT_TRUE(registry_.Models().empty());
  EXPECT_TRUE(store.puts.empty() && store.removes.empty()) << "what peers wrote is not written back";
}

// Issue 35: a member re-publishing an admin's model with its digests stripped or its
// config.json swapped was taken as a refresh ("OK"), and ranks loaded it "verified".
TEST_F(ModelRegistryTest, AMemberNeverChangesARecordRegisteredOnAnotherNode) {
  ASSERT_TRUE(registry_.Put(Plain(Digested("a")), RecordOrigin::kRegister).ok());
  v1::ModelRecord stripped = Digested("b");
  for (v1::TensorLocation& t : *stripped.mutable_tensors()) t.clear_digest();
  v1::ModelRecord swapped = Digested("b");
  swapped.set_hf_config_json(R"({"hidden_act": "relu"})");
  for (const v1::ModelRecord& forged : {stripped, swapped}) {
    const absl::Status refused = registry_.Put(Plain(forged), RecordOrigin::kMemberPublish);
    EXPECT_EQ(refused,
              absl::PermissionDeniedError(
                  "model \"m\" is registered on node a; node b's member may not change it (only what "
                  "is registered on its own node): an admin replaces it with `metactl register "
                  "--replace`"));
  }
  const std::shared_ptr<const RegisteredModel> held = *registry_.Find("m");
  EXPECT_TRUE(held->record.checkpoint.tensors[0].digest.has_value()) << "the digests must survive";
  EXPECT_EQ(held->record.registered_on, "a");
  // The same record again from another node changes nothing, and is not refused.
  EXPECT_TRUE(registry_.Put(Plain(Digested("b")), RecordOrigin::kMemberPublish).ok());
  EXPECT_EQ((*registry_.Find("m"))->version, held->version);
  // An admin's PublishModel (a forwarded --replace) may.
  EXPECT_TRUE(registry_.Put(Plain(stripped), RecordOrigin::kPublish, /*replace=*/true).ok());
  EXPECT_FALSE((*registry_.Find("m"))->record.checkpoint.tensors[0].digest.has_value());
}

TEST_F(ModelRegistryTest, AMemberRefreshesWhatIsRegisteredOnItsOwnNode) {
  ASSERT_TRUE(registry_.Put(Plain(Digested("b")), RecordOrigin::kMemberPublish).ok());
  v1::ModelRecord refreshed = Digested("b");
  refreshed.set_hf_config_json(R"({"hidden_act": "silu"})");
  for (v1::TensorLocation& t : *refreshed.mutable_tensors()) testing::SetFakeDigest(&t, 99);
  ASSERT_TRUE(registry_.Put(Plain(refreshed), RecordOrigin::kMemberPublish).ok()) << "its own: a refresh";
  EXPECT_EQ((*registry_.Find("m"))->record.hf_config_json, R"({"hidden_act": "silu"})");
  v1::ModelRecord elsewhere = refreshed;
  elsewhere.set_checkpoint_dir("/models/other");
  EXPECT_EQ(registry_.Put(Plain(elsewhere), RecordOrigin::kMemberPublish).code(),
            absl::StatusCode::kAlreadyExists)
      << "another checkpoint needs an admin's --replace, even on its own node";
}

// The hostile-cluster switch: no record without every digest, whatever its origin.
TEST(ModelRegistryRequireDigestsTest, EveryOriginNeedsEveryTensorsDigest) {
  ModelRegistry registry(ModelRegistry::Options{.require_digests = true});
  v1::ModelRecord partly = Digested("a");
  partly.mutable_tensors(1)->clear_digest();
  partly.mutable_tensors(2)->clear_digest();
  for (RecordOrigin origin : {RecordOrigin::kRegister, RecordOrigin::kPublish, RecordOrigin::kMemberPublish,
                              RecordOrigin::kRestore, RecordOrigin::kSharedRegistry}) {
    EXPECT_EQ(
        registry.Put(Plain(partly), origin),
        absl::FailedPreconditionError(
            "model \"m\": 2 of its 3 tensors have no digest (\"layers.0.w\", ...), and this daemon holds "
            "only models whose every tensor has one (require_digests in its node config): register it "
            "without --no-digest"))
        << static_cast<int>(origin);
  }
  EXPECT_TRUE(registry.Models().empty());
  EXPECT_TRUE(registry.Put(Plain(Digested("a")), RecordOrigin::kRegister).ok());
}

// Issue 35: 256 published models of 100k tensors were allowed (~23 GiB). The records held are
// bounded together by their wire size, a name registered anew counting once.
TEST(ModelRegistryBytesTest, TheRecordsHeldStayWithinMaxRegistrySize) {
  const uint64_t one = ModelRecordToProto(Record()).ByteSizeLong();
  ModelRegistry registry(ModelRegistry::Options{.max_record_bytes = 2 * one + one / 2});
  ASSERT_TRUE(registry.Put(Record(), RecordOrigin::kRegister).ok());
  ASSERT_TRUE(registry.Put(Record(), RecordOrigin::kRegister, /*replace=*/true).ok())
      << "the same name counts once";
  v1::ModelRecord second = TiedModel();
  second.set_name("m2");
  ASSERT_TRUE(registry.Put(Plain(second), RecordOrigin::kPublish).ok());
  v1::ModelRecord third = TiedModel();
  third.set_name("m3");
  const uint64_t held = one + second.ByteSizeLong();
  for (RecordOrigin origin :
       {RecordOrigin::kRegister, RecordOrigin::kSharedRegistry, RecordOrigin::kRestore}) {
    const absl::Status refused = registry.Put(Plain(third), origin);
    EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(refused.message(),
              absl::StrCat("the models registered hold ", held, " bytes of records, and model m3's ",
                           third.ByteSizeLong(), " would pass the ", 2 * one + one / 2,
                           " this daemon holds (max_registry_size in its node config); "
                           "unregister some"));
  }
  ASSERT_TRUE(registry.Remove("m").ok());
  EXPECT_TRUE(registry.Put(Plain(third), RecordOrigin::kRegister).ok())
      << "an unregistered model's bytes are free";
  EXPECT_TRUE(registry.Drop("m2"));
  EXPECT_TRUE(registry.Put(Plain(second), RecordOrigin::kRegister).ok());
}

// A record names the node that registered it: only there are its stamps' device, inode and
// ctime this host's, so only there is a file served checked against the whole stamp (issue 35).
TEST(ModelRegistryStamps, OnlyRecordsRegisteredOnThisNodeCheckTheFilesAgainstTheirStamps) {
  MemoryFileSystem files;
  // model-1.safetensors as StatedModel registered it (1001 bytes), modified since.
  files.Put("mem://m/model-1.safetensors", std::string(1001, 'x'), /*mtime_ns=*/1796054400000000099);
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> opened = files.Open("mem://m/model-1.safetensors");
  ASSERT_TRUE(opened.ok()) << opened.status();
  const std::string path = "/models/m/model-1.safetensors";
  const auto served_by = [&](const ModelRegistry::Options& options, RecordOrigin origin) {
    ModelRegistry registry(options);
    EXPECT_TRUE(registry.Put(Plain(StatedModel()), origin, false, nullptr, "test").ok());
    absl::StatusOr<std::shared_ptr<const ServedRanges>> served = registry.ServedRangesOf("m");
    EXPECT_TRUE(served.ok()) << served.status();
    return served.ok() ? (*served)->CheckOpened(path, **opened) : served.status();
  };
  for (RecordOrigin origin :
       {RecordOrigin::kRestore, RecordOrigin::kSharedRegistry, RecordOrigin::kPublish}) {
    // StatedModel is registered on node "a".
    absl::Status here = served_by({.node = "a"}, origin);
    EXPECT_EQ(here.code(), absl::StatusCode::kFailedPrecondition) << here;
    EXPECT_THAT(std::string(here.message()),
                ::testing::StartsWith(absl::StrCat(path, " changed since it was registered: mtime ")));
    // Elsewhere its files are checked against their headers alone (these bytes are none).
    EXPECT_EQ(served_by({.node = "b"}, origin).code(), absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(served_by({}, RecordOrigin::kRegister).code(), absl::StatusCode::kFailedPrecondition)
      << "this daemon's own registration";
}

// What state_dir and etcd hold of a record (ModelRecordToProto) keeps every field of each stamp;
// a record written before device, inode and ctime existed still parses, with them unrecorded.
TEST(ModelRecordStamps, EveryFieldOfAStampIsPersistedAndOlderRecordsStillParse) {
  v1::ModelRecord stamped = StatedModel();
  stamped.mutable_file_stats(1)->set_device(2049);
  stamped.mutable_file_stats(1)->set_inode(77);
  stamped.mutable_file_stats(1)->set_ctime_ns(1796054400000000005);
  const v1::ModelRecord again = ModelRecordToProto(Plain(stamped));
  EXPECT_EQ(again.SerializeAsString(), stamped.SerializeAsString());
  const FileStamp stamp = Plain(again).file_stats[1].stamp;
  EXPECT_EQ(stamp, (FileStamp{1001, 1796054400000000001, 2049, 77, 1796054400000000005}));
  const FileStamp older = Plain(StatedModel()).file_stats[1].stamp;
  EXPECT_TRUE(older.recorded());
  EXPECT_FALSE(older.identity_recorded());
}

// An object's version (its ETag, util/fs/s3/) is persisted with its stamp, and a record's
// version is held to what an ETag can be (128 printable bytes), since refusals echo it.
TEST(ModelRecordStamps, AnObjectsVersionIsPersistedAndBounded) {
  v1::ModelRecord versioned = StatedModel();
  versioned.mutable_file_stats(1)->set_version("\"b1bee03ce3aaad0383ae075c320dfc31-3\"");
  const v1::ModelRecord again = ModelRecordToProto(Plain(versioned));
  EXPECT_EQ(again.SerializeAsString(), versioned.SerializeAsString());
  EXPECT_EQ(Plain(again).file_stats[1].stamp.version, "\"b1bee03ce3aaad0383ae075c320dfc31-3\"");
  for (const std::string& bad : {std::string(129, 'e'), std::string("\"etag\n\"")}) {
    v1::ModelRecord forged = StatedModel();
    forged.mutable_file_stats(1)->set_version(bad);
    EXPECT_EQ(ModelRecordFromProto(forged).status().message(),
              "model record m: file model-1.safetensors: a version of more than 128 printable bytes");
  }
}

TEST_F(ModelRegistryTest, AStampThatDiffersOnlyInItsInodeIsARefresh) {
  ASSERT_TRUE(registry_.Put(Plain(StatedModel()), RecordOrigin::kRegister).ok());
  v1::ModelRecord renamed_over = StatedModel();
  renamed_over.mutable_file_stats(1)->set_inode(77);
  ASSERT_TRUE(registry_.Put(Plain(renamed_over), RecordOrigin::kRegister).ok());
  EXPECT_EQ((*registry_.Find("m"))->record.file_stats[1].stamp.inode, 77u)
      << "`metactl register --refresh` after a file was replaced must record the new file";
}

}  // namespace
}  // namespace metaload
