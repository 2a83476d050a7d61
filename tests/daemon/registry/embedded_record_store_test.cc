// The embedded registry: records survive a reopen, a write interrupted by a crash leaves the
// previous record, and hostile or damaged files are refused, each with its own error, without
// crashing or hiding the other models (issue 12).
#include "daemon/registry/embedded_record_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "tests/test_support.h"
#include "util/hash/sha256.h"

namespace metaload {
namespace {

using ::metaload::testing::ReadFileOrDie;
using ::metaload::testing::TempDir;
using ::metaload::testing::WriteFileOrDie;
using ::testing::HasSubstr;

v1::ModelRecord StoreRecord(const std::string& name, const std::string& dir = "/models/m") {
  v1::ModelRecord r;
  r.set_name(name);
  r.set_checkpoint_dir(dir);
  r.set_skeleton_json(R"({"format": "metaload.skeleton/1"})");
  r.set_registered_on("a");
  v1::TensorLocation* t = r.add_tensors();
  t->set_name("w");
  t->set_dtype("BF16");
  t->add_shape(4);
  t->set_file("model.safetensors");
  t->set_begin_offset(8);
  t->set_end_offset(16);
  return r;
}

std::unique_ptr<EmbeddedRecordStore> OpenOrDie(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<EmbeddedRecordStore>> store = EmbeddedRecordStore::Open(dir);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

std::vector<std::string> Names(const StoredModels& stored) {
  std::vector<std::string> names;
  for (const StoredRecord& r : stored.records) names.push_back(r.record.name());
  return names;
}

TEST(EmbeddedModelStoreTest, RecordsSurviveReopeningAndRemovalsToo) {
  TempDir tmp;
  const std::string dir = tmp.File("state");
  {
    auto store = OpenOrDie(dir);
    ASSERT_TRUE(store->Put(StoreRecord("b")).ok());
    ASSERT_TRUE(store->Put(StoreRecord("a")).ok());
    ASSERT_TRUE(store->Put(StoreRecord("gone")).ok());
    ASSERT_TRUE(store->Remove("gone").ok());
    EXPECT_TRUE(store->Remove("never-there").ok());
  }
  auto store = OpenOrDie(dir);
  absl::StatusOr<StoredModels> stored = store->Load();
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_THAT(Names(*stored), ::testing::ElementsAre("a", "b"));
  EXPECT_TRUE(stored->skipped.empty());
  EXPECT_EQ(stored->records[0].record.SerializeAsString(), StoreRecord("a").SerializeAsString());
  EXPECT_EQ(stored->records[0].origin, store->PathOf("a"));
}

TEST(EmbeddedModelStoreTest, CreatesStateDirPrivateToItsOwner) {
  TempDir tmp;
  const std::string dir = tmp.File("state");
  auto store = OpenOrDie(dir);
  ASSERT_TRUE(store->Put(StoreRecord("m")).ok());
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(store->PathOf("m").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(EmbeddedModelStoreTest, ReplacingARecordLeavesOnlyTheNewOne) {
  TempDir tmp;
  auto store = OpenOrDie(tmp.File("state"));
  ASSERT_TRUE(store->Put(StoreRecord("m", "/models/old")).ok());
  ASSERT_TRUE(store->Put(StoreRecord("m", "/models/new")).ok());
  absl::StatusOr<StoredModels> stored = store->Load();
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->records.size(), 1u);
  EXPECT_EQ(stored->records[0].record.checkpoint_dir(), "/models/new");
}

TEST(EmbeddedModelStoreTest, ATempFileLeftByACrashIsIgnoredAndCleanedUp) {
  TempDir tmp;
  auto store = OpenOrDie(tmp.File("state"));
  ASSERT_TRUE(store->Put(StoreRecord("m", "/models/old")).ok());
  // A crash between writing the temp file and renaming it: half a new record beside the old.
  const std::string temp = store->PathOf("m") + ".tmp";
  const std::string half = EncodeModelFile(StoreRecord("m", "/models/new"));
  WriteFileOrDie(temp, half.substr(0, half.size() / 2));
  WriteFileOrDie(store->PathOf("other") + ".tmp", "garbage");
  absl::StatusOr<StoredModels> stored = store->Load();
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->records.size(), 1u);
  EXPECT_EQ(stored->records[0].record.checkpoint_dir(), "/models/old");
  EXPECT_TRUE(stored->skipped.empty());
  struct stat st;
  EXPECT_NE(::stat(temp.c_str(), &st), 0) << "the leftover temp file was not removed";
}

TEST(EmbeddedModelStoreTest, ASecondStoreOnTheSameStateDirIsRefused) {
  TempDir tmp;
  auto first = OpenOrDie(tmp.File("state"));
  absl::StatusOr<std::unique_ptr<EmbeddedRecordStore>> second = EmbeddedRecordStore::Open(tmp.File("state"));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("another metad"));
  first.reset();
  EXPECT_TRUE(EmbeddedRecordStore::Open(tmp.File("state")).ok()) << "the lock outlived its holder";
}

TEST(EmbeddedModelStoreTest, AStateDirUnderAMissingFolderIsNotFound) {
  TempDir tmp;
  absl::StatusOr<std::unique_ptr<EmbeddedRecordStore>> store =
      EmbeddedRecordStore::Open(tmp.File("no/such/state"));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kNotFound);
}

TEST(EmbeddedModelStoreTest, ANameThatIsNoFileNameIsRefusedBeforeAnyWrite) {
  TempDir tmp;
  auto store = OpenOrDie(tmp.File("state"));
  EXPECT_EQ(store->Put(StoreRecord("../escape")).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Remove("../escape").code(), absl::StatusCode::kInvalidArgument);
}

TEST(EmbeddedModelStoreTest, MemberBindingsSurviveReopeningAndBadOnesAreSkipped) {
  TempDir tmp;
  {
    auto store = OpenOrDie(tmp.File("state"));
    ASSERT_TRUE(store->PutBinding({"b", "token:member:node-b.token"}).ok());
    ASSERT_TRUE(store->PutBinding({"c", "cert:node-c"}).ok());
    ASSERT_TRUE(store->PutBinding({"c", "cert:node-c2"}).ok());  // replaced whole
    ASSERT_TRUE(store->RemoveBinding("d").ok()) << "none: nothing to remove";
    EXPECT_EQ(store->PutBinding({"../escape", "x"}).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(store->PutBinding({"e", std::string(2000, 'x')}).code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(ReadFileOrDie(tmp.File("state/members/b.id")), "token:member:node-b.token\n");
  // Hostile files someone who can write state_dir left: another name, no newline, control
  // bytes, a huge file, a leftover of an interrupted write.
  WriteFileOrDie(tmp.File("state/members/notes.txt"), "x\n");
  WriteFileOrDie(tmp.File("state/members/f.id"), "token:member:f.token");
  WriteFileOrDie(tmp.File("state/members/g.id"), "cert:g\x1b[2J\n");
  WriteFileOrDie(tmp.File("state/members/h.id"), std::string(4096, 'h') + "\n");
  WriteFileOrDie(tmp.File("state/members/i.id.tmp"), "cert:i\n");
  auto store = OpenOrDie(tmp.File("state"));
  absl::StatusOr<StoredBindings> loaded = store->LoadBindings();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->bindings.size(), 2u);
  EXPECT_EQ(loaded->bindings[0].name, "b");
  EXPECT_EQ(loaded->bindings[0].identity, "token:member:node-b.token");
  EXPECT_EQ(loaded->bindings[1].name, "c");
  EXPECT_EQ(loaded->bindings[1].identity, "cert:node-c2");
  ASSERT_EQ(loaded->skipped.size(), 4u);
  EXPECT_THAT(loaded->skipped[0].message(), HasSubstr("f.id: not one line of printable ASCII"));
  EXPECT_THAT(loaded->skipped[1].message(), HasSubstr("g.id: not one line of printable ASCII"));
  EXPECT_THAT(loaded->skipped[2].message(), HasSubstr("h.id"));
  EXPECT_THAT(loaded->skipped[3].message(), HasSubstr("notes.txt: not a member binding"));
  EXPECT_FALSE(std::filesystem::exists(tmp.File("state/members/i.id.tmp")));
  ASSERT_TRUE(store->RemoveBinding("b").ok());
  EXPECT_FALSE(std::filesystem::exists(tmp.File("state/members/b.id")));
}

// Issue 35: "token:member:node b.token" was written and then skipped at restart. Whatever
// PutBinding takes reads back as it was; what it could not read back it refuses.
TEST(EmbeddedModelStoreTest, TheWorstAllowedBindingsReadBackIdentically) {
  TempDir tmp;
  std::string every_char;  // every character an identity may hold
  for (char c = '!'; c <= '~'; ++c) {
    if (c != '"' && c != '\\') every_char += c;
  }
  const std::vector<MemberBinding> worst = {
      {"-", "token:member:" + every_char},           {"_", "cert:" + std::string(kMaxIdentityNameBytes, '~')},
      {"b.id", std::string(kMaxIdentityBytes, 'x')}, {"x.tmp", "anonymous"},
      {std::string(kMaxNameBytes, 'n'), "token"},
  };
  {
    auto store = OpenOrDie(tmp.File("state"));
    for (const MemberBinding& binding : worst) ASSERT_TRUE(store->PutBinding(binding).ok()) << binding.name;
    const absl::Status refused = store->PutBinding({"c", "token:member:node b.token"});
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(refused.message(),
              "the identity of node c \"token:member:node b.token\" may hold only printable ASCII characters "
              "other than space, '\"' and '\\'");
  }
  absl::StatusOr<StoredBindings> loaded = OpenOrDie(tmp.File("state"))->LoadBindings();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->skipped.empty()) << loaded->skipped[0];
  std::vector<MemberBinding> expected = worst;
  std::sort(expected.begin(), expected.end(),
            [](const MemberBinding& x, const MemberBinding& y) { return x.name < y.name; });
  ASSERT_EQ(loaded->bindings.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(loaded->bindings[i].name, expected[i].name);
    EXPECT_EQ(loaded->bindings[i].identity, expected[i].identity) << expected[i].name;
  }
}

// A damaged file is skipped with its path and reason; the others are still loaded.
class DamagedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenOrDie(tmp_.File("state"));
    ASSERT_TRUE(store_->Put(StoreRecord("good")).ok());
    ASSERT_TRUE(store_->Put(StoreRecord("bad")).ok());
    bytes_ = ReadFileOrDie(store_->PathOf("bad"));
  }
  // Load with `bad`'s file holding `contents`: the message of why it was skipped.
  std::string SkippedBecause(const std::string& contents) {
    WriteFileOrDie(store_->PathOf("bad"), contents);
    absl::StatusOr<StoredModels> stored = store_->Load();
    EXPECT_TRUE(stored.ok()) << stored.status();
    if (!stored.ok()) return "";
    EXPECT_THAT(Names(*stored), ::testing::ElementsAre("good"));
    EXPECT_EQ(stored->skipped.size(), 1u);
    if (stored->skipped.size() != 1) return "";
    EXPECT_EQ(stored->skipped[0].code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(stored->skipped[0].message(), HasSubstr(store_->PathOf("bad")));
    return std::string(stored->skipped[0].message());
  }

  TempDir tmp_;
  std::unique_ptr<EmbeddedRecordStore> store_;
  std::string bytes_;
};

TEST_F(DamagedFileTest, AnEmptyFileIsShorterThanTheHeader) {
  EXPECT_THAT(SkippedBecause(""), HasSubstr("shorter than the 80-byte header"));
}

TEST_F(DamagedFileTest, GarbageBytesHaveTheWrongMagic) {
  EXPECT_THAT(SkippedBecause(std::string(200, '\xff')), HasSubstr("not a model record"));
}

TEST_F(DamagedFileTest, AHugeSizeInTheHeaderIsRefusedBeforeAnyAllocation) {
  std::string hostile = bytes_;
  for (int i = 8; i < 16; ++i) hostile[i] = '\xff';  // 2^64 - 1 payload bytes
  EXPECT_THAT(SkippedBecause(hostile), HasSubstr("exceeds the limit"));
}

TEST_F(DamagedFileTest, ATruncatedFileIsRefusedThoughItsPrefixWouldParse) {
  EXPECT_THAT(SkippedBecause(bytes_.substr(0, bytes_.size() - 3)), HasSubstr("(truncated)"));
}

TEST_F(DamagedFileTest, TrailingBytesAreRefused) {
  EXPECT_THAT(SkippedBecause(bytes_ + "x"), HasSubstr("trailing"));
}

TEST_F(DamagedFileTest, AFlippedPayloadByteFailsTheDigest) {
  std::string flipped = bytes_;
  flipped.back() ^= 0x01;
  EXPECT_THAT(SkippedBecause(flipped), HasSubstr("SHA-256"));
}

TEST_F(DamagedFileTest, AWellFramedPayloadThatIsNoRecordIsRefused) {
  const std::string payload = "\xff\xff\xff\xff";  // a field tag with no end: no protobuf
  std::string hostile(kModelFileMagic, 8);
  hostile += std::string("\x04\0\0\0\0\0\0\0", 8);
  hostile += Sha256Hex(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()));
  hostile += payload;
  EXPECT_THAT(SkippedBecause(hostile), HasSubstr("not a ModelRecord"));
}

TEST_F(DamagedFileTest, ARecordUnderAnotherNameIsRefused) {
  EXPECT_THAT(SkippedBecause(EncodeModelFile(StoreRecord("other"))), HasSubstr("holds model \"other\""));
}

}  // namespace
}  // namespace metaload
