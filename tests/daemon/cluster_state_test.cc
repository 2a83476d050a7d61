// The coordinator's state: members that expire, models that are not replaced by accident,
// plans computed once and each rank answered with only its part (issue 9).
#include "daemon/cluster/cluster_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/requests/request_checks.h"
#include "proto/convert.h"

namespace metaload {
namespace {

constexpr char kSkeleton[] = R"({"format": "metaload.skeleton/1", "model": "m", "tensors": [
  {"name": "embed.weight", "shape": [4, 8], "dtype": "BF16"},
  {"name": "layers.0.w", "shape": [4, 8], "dtype": "BF16"},
  {"name": "layers.1.w", "shape": [4, 8], "dtype": "BF16"}],
  "tied": [["embed.weight", "head.weight"]]})";

v1::ModelRecord Record(const std::string& dir = "/models/m") {
  v1::ModelRecord r;
  r.set_name("m");
  r.set_checkpoint_dir(dir);
  r.set_skeleton_json(kSkeleton);
  r.set_registered_on("a");
  int i = 0;
  for (const char* name : {"embed.weight", "layers.0.w", "layers.1.w"}) {
    v1::TensorLocation* t = r.add_tensors();
    t->set_name(name);
    t->set_dtype("BF16");
    t->add_shape(4);
    t->add_shape(8);
    t->set_file(absl::StrCat("model-", i, ".safetensors"));
    t->set_begin_offset(8);
    t->set_end_offset(8 + 64);
    ++i;
  }
  EXPECT_TRUE(CheckModelRecord(r).ok());
  return r;
}

v1::NodeInfo Node(const std::string& name, int gpus, std::vector<std::string> roots = {"/models"}) {
  v1::NodeInfo n;
  n.set_name(name);
  n.set_address(name + ":7070");
  n.set_gpu_count(gpus);
  n.set_gpu_memory_bytes(1ull << 30);
  for (const std::string& r : roots) n.add_roots(r);
  return n;
}

class ClusterStateTest : public ::testing::Test {
 protected:
  absl::Time now_ = absl::FromUnixSeconds(1'000'000);
  ClusterState state_{ClusterState::Options{absl::Seconds(10), 2, 8}, [this] { return now_; }};
};

TEST_F(ClusterStateTest, MembersThatStopRejoiningExpireButTheCoordinatorNever) {
  state_.SetSelf(Node("a", 1));
  ASSERT_TRUE(state_.Join(Node("b", 1)).ok());
  EXPECT_EQ(state_.Members().size(), 2u);
  now_ += absl::Seconds(9);
  ASSERT_EQ(*state_.Join(Node("c", 1)), true);
  now_ += absl::Seconds(2);  // b last seen 11 s ago, c 2 s ago
  std::vector<std::string> names;
  for (const v1::NodeInfo& n : state_.Members()) names.push_back(n.name());
  EXPECT_EQ(names, (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(*state_.Join(Node("b", 1)), true) << "b came back";
  EXPECT_EQ(*state_.Join(Node("b", 1)), false) << "a refresh, not a new member";
}

TEST_F(ClusterStateTest, StatusRemembersMembersThatAreDownOrLeftWithTheirAge) {
  state_.SetSelf(Node("a", 1));
  ASSERT_TRUE(state_.Join(Node("b", 1)).ok());
  ASSERT_TRUE(state_.Join(Node("c", 1)).ok());
  ASSERT_TRUE(state_.Join(Node("d", 1)).ok());
  now_ += absl::Seconds(4);
  ASSERT_TRUE(state_.Join(Node("c", 1)).ok());
  ASSERT_TRUE(state_.Join(Node("d", 1)).ok());
  v1::NodeInfo other_d = Node("d", 1);
  other_d.set_address("evil:7070");
  EXPECT_EQ(state_.Leave(other_d).code(), absl::StatusCode::kInvalidArgument)
      << "only the daemon that joined under a name may take it out of plans";
  EXPECT_EQ(state_.Leave(Node("a", 1)).code(), absl::StatusCode::kNotFound) << "the coordinator never leaves";
  EXPECT_EQ(state_.Leave(Node("x", 1)).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(state_.Leave(Node("d", 1)).ok());
  now_ += absl::Seconds(7);  // b last seen 11 s ago, c and d 7 s ago
  std::vector<std::string> rows;
  for (const MemberStatus& m : state_.MemberStates()) {
    rows.push_back(absl::StrCat(m.info.name(), " ", m.state, " ", absl::FormatDuration(m.since_seen)));
  }
  EXPECT_EQ(rows, (std::vector<std::string>{"a 0 0", "b 1 11s", "c 0 7s", "d 2 7s"}));
  std::vector<std::string> live;
  for (const v1::NodeInfo& n : state_.Members()) live.push_back(n.name());
  EXPECT_EQ(live, (std::vector<std::string>{"a", "c"})) << "down and left members are out of plans";
  EXPECT_EQ(*state_.Join(Node("d", 1)), true) << "a member that left comes back by joining";
}

TEST_F(ClusterStateTest, ANameTakenByALiveMemberOrTheCoordinatorIsRefused) {
  state_.SetSelf(Node("a", 1));
  v1::NodeInfo impostor = Node("a", 1);
  impostor.set_address("evil:7070");
  EXPECT_EQ(state_.Join(impostor).status().code(), absl::StatusCode::kInvalidArgument);
  impostor.set_address("a:7070");
  EXPECT_EQ(state_.Join(impostor).status().code(), absl::StatusCode::kInvalidArgument)
      << "the coordinator's own entry cannot be replaced";
  ASSERT_TRUE(state_.Join(Node("b", 1)).ok());
  v1::NodeInfo other = Node("b", 1);
  other.set_address("10.0.0.9:7070");
  EXPECT_EQ(state_.Join(other).status().code(), absl::StatusCode::kInvalidArgument);
  now_ += absl::Seconds(11);
  EXPECT_TRUE(state_.Join(other).ok()) << "once expired, the name is free";
}

// `metactl register --refresh`, or the same registration after a file was rewritten in place:
// the new file stats replace the old (or none, from a record older than them) without
// --replace, and ranks get them with each file (docs/integrity.md).
TEST_F(ClusterStateTest, TheSameRegistrationWithFilesStatedAnewReplacesTheStatsRanksSee) {
  state_.SetSelf(Node("a", 1));
  ASSERT_TRUE(state_.PutModel(Record(), false).ok());  // no stats: unchecked
  absl::StatusOr<v1::GetLayoutResponse> layout = state_.LayoutFor("m");
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->checkpoint_dir(), "/models/m");
  ASSERT_EQ(layout->files_size(), 3);
  for (const v1::FileSource& f : layout->files()) {
    EXPECT_EQ(f.registered_size_bytes(), 0u) << f.file();
    EXPECT_EQ(f.registered_mtime_ns(), 0) << f.file();
  }
  v1::ModelRecord stated = Record();
  for (int i = 0; i < 3; ++i) {
    v1::FileStat* stat = stated.add_file_stats();
    stat->set_file(absl::StrCat("model-", i, ".safetensors"));
    stat->set_size_bytes(1000 + i);
    stat->set_mtime_ns(1796054400000000000 + i);
  }
  ASSERT_TRUE(state_.PutModel(stated, false).ok()) << "a refresh needs no --replace";
  layout = state_.LayoutFor("m");
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->files_size(), 3);
  EXPECT_EQ(layout->files(1).file(), "model-1.safetensors");
  EXPECT_EQ(layout->files(1).registered_size_bytes(), 1001u);
  EXPECT_EQ(layout->files(1).registered_mtime_ns(), 1796054400000000001);
  EXPECT_TRUE(state_.PutModel(stated, false).ok()) << "the same again is idempotent";
  v1::ModelRecord elsewhere = stated;
  elsewhere.set_checkpoint_dir("/models/other");
  EXPECT_EQ(state_.PutModel(elsewhere, false).code(), absl::StatusCode::kAlreadyExists)
      << "another checkpoint still needs --replace";
}

TEST_F(ClusterStateTest, RegisteringANameAgainWithAnotherCheckpointNeedsReplace) {
  ASSERT_TRUE(state_.PutModel(Record(), false).ok());
  EXPECT_TRUE(state_.PutModel(Record(), false).ok()) << "the same registration again is accepted";
  absl::Status again = state_.PutModel(Record("/models/other"), false);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(again.message().find("is already registered from /models/m"), absl::string_view::npos) << again;
  EXPECT_NE(again.message().find("pass --replace"), absl::string_view::npos) << again;
  EXPECT_TRUE(state_.PutModel(Record("/models/other"), true).ok());
  EXPECT_EQ(state_.Models().front().checkpoint_dir(), "/models/other");
}

TEST_F(ClusterStateTest, UnregisteredModelsAreGone) {
  state_.SetSelf(Node("a", 2));
  ASSERT_TRUE(state_.PutModel(Record(), false).ok());
  ASSERT_TRUE(state_.RemoveModel("m").ok());
  EXPECT_EQ(state_.PlanFor("m", 2, StrategyOptions{}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(state_.RemoveModel("m").code(), absl::StatusCode::kNotFound);
}

TEST_F(ClusterStateTest, APlanIsComputedOnceAndRecomputedWhenMembersChange) {
  state_.SetSelf(Node("a", 2));
  ASSERT_TRUE(state_.PutModel(Record(), false).ok());
  auto first = state_.PlanFor("m", 2, StrategyOptions{});
  auto second = state_.PlanFor("m", 2, StrategyOptions{});
  ASSERT_TRUE(first.ok() && second.ok()) << first.status();
  EXPECT_EQ(first->get(), second->get());
  ASSERT_TRUE(state_.Join(Node("b", 2)).ok());
  auto third = state_.PlanFor("m", 2, StrategyOptions{});
  ASSERT_TRUE(third.ok());
  EXPECT_NE(first->get(), third->get());
  StrategyOptions fp32;
  fp32.load_dtype = DType::kF32;
  auto converted = state_.PlanFor("m", 2, fp32);
  ASSERT_TRUE(converted.ok());
  EXPECT_NE((*converted)->digest, (*third)->digest) << "options are part of the digest";
  EXPECT_EQ((*third)->digest, PlanDigest((*third)->plan, StrategyOptions{}));
  EXPECT_EQ((*third)->plan.Expand().ranks.size(), 2u);
}

// `register --digest` (issue 12): a record differing only in its digests is the same
// registration made anew (no --replace); the digests reach GetLayout and every rank's items,
// sliced ones too (serialized whole once per plan), and survive the rank's parse.
TEST_F(ClusterStateTest, DigestsReplaceWithoutReplaceAndReachLayoutAndEveryRanksItems) {
  state_.SetSelf(Node("a", 2));
  ASSERT_TRUE(state_.PutModel(Record(), false).ok());
  v1::ModelRecord digested = Record();
  for (int i = 0; i < digested.tensors_size(); ++i) {
    digested.mutable_tensors(i)->set_xxh3(0x2D06800538D394C2ull + static_cast<uint64_t>(i));
  }
  ASSERT_TRUE(state_.PutModel(digested, false).ok()) << "adding digests needs no --replace";
  EXPECT_TRUE(state_.PutModel(digested, false).ok()) << "the same again is idempotent";
  absl::StatusOr<v1::GetLayoutResponse> layout = state_.LayoutFor("m");
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->tensors_size(), 3);
  EXPECT_TRUE(layout->tensors(1).has_xxh3());
  EXPECT_EQ(layout->tensors(1).xxh3(), 0x2D06800538D394C3ull);
  absl::StatusOr<Checkpoint> checkpoint = CheckpointFromRecord(digested);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  ASSERT_NE(checkpoint->Find("layers.1.w"), nullptr);
  EXPECT_EQ(checkpoint->Find("layers.1.w")->xxh3, std::optional<uint64_t>(0x2D06800538D394C4ull));

  for (const char* strategy : {"layers", "fsdp"}) {
    StrategyOptions options;
    options.strategy = strategy;
    auto planned = state_.PlanFor("m", 2, options);
    ASSERT_TRUE(planned.ok()) << strategy << ": " << planned.status();
    int items = 0;
    for (int rank = 0; rank < 2; ++rank) {
      auto response = state_.ResponseFor(**planned, rank);
      ASSERT_TRUE(response.ok()) << response.status();
      absl::StatusOr<Plan> parsed = PlanFromProto(response->plan());
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      for (const ReadItem& item : parsed->ranks[0].items) {
        const TensorLayout* stored = checkpoint->Find(item.tensor);
        if (stored == nullptr) continue;  // the tied alias
        EXPECT_EQ(item.stored_xxh3, stored->xxh3) << strategy << " " << item.tensor;
        ++items;
      }
    }
    EXPECT_GE(items, 3) << strategy;
  }
  auto plain = state_.PlanFor("m", 2, StrategyOptions{});
  ASSERT_TRUE(state_.PutModel(Record(), false).ok()) << "dropping digests needs no --replace";
  auto after = state_.PlanFor("m", 2, StrategyOptions{});
  ASSERT_TRUE(plain.ok() && after.ok());
  EXPECT_NE((*plain)->digest, (*after)->digest) << "a plan with digests is another plan";
  EXPECT_FALSE(state_.LayoutFor("m")->tensors(0).has_xxh3());
}

TEST_F(ClusterStateTest, EachRankIsAnsweredWithOnlyItsPartAndAFewServers) {
  state_.SetSelf(Node("a", 1));
  for (const char* n : {"b", "c", "d"}) ASSERT_TRUE(state_.Join(Node(n, 1)).ok());
  ASSERT_TRUE(state_.PutModel(Record(), false).ok());
  auto planned = state_.PlanFor("m", 4, StrategyOptions{});
  ASSERT_TRUE(planned.ok()) << planned.status();
  std::set<std::string> digests;
  for (int rank = 0; rank < 4; ++rank) {
    auto response = state_.ResponseFor(**planned, rank);
    ASSERT_TRUE(response.ok());
    ASSERT_EQ(response->plan().ranks_size(), 1);
    const v1::RankPlan& mine = response->plan().ranks(0);
    EXPECT_EQ(mine.rank(), rank);
    EXPECT_EQ(response->plan().world_size(), 4);
    EXPECT_TRUE(response->skeleton_json().empty());
    std::set<std::string> needed;
    for (const v1::ReadItem& item : mine.items()) needed.insert(item.file());
    std::set<std::string> listed;
    for (const v1::FileSource& f : response->files()) {
      listed.insert(f.file());
      ASSERT_LE(f.servers_size(), 2) << "servers_per_file";
      EXPECT_EQ(f.servers(0).node(), mine.node()) << "the rank's own node first";
    }
    EXPECT_EQ(listed, needed);
    bool holds_embed = false;
    for (const v1::ReadItem& item : mine.items()) holds_embed |= item.tensor() == "embed.weight";
    EXPECT_EQ(response->tied_groups_size(), holds_embed ? 1 : 0);
    digests.insert(response->plan_digest());
    EXPECT_EQ(response->init_missing(), "error");
  }
  EXPECT_EQ(digests.size(), 1u) << "every rank gets the same digest";
  EXPECT_EQ(state_.ResponseFor(**planned, 4).status().code(), absl::StatusCode::kInvalidArgument);
  auto whole = state_.ResponseFor(**planned, std::nullopt);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->plan().ranks_size(), 4);
  EXPECT_EQ(whole->files_size(), 3);
  EXPECT_EQ(whole->files(0).servers_size(), 4) << "the whole plan lists every server";
  EXPECT_FALSE(whole->skeleton_json().empty());
}

// Failover (issue 12): a rank gets every server of a file (a handful), its own node's first, the
// others by their load when it asks, ties rotated by rank.
TEST(ClusterStateLoad, OtherServersAreListedLeastLoadedFirstAtAnswerTime) {
  absl::Time now = absl::FromUnixSeconds(1'000'000);
  ClusterState state(ClusterState::Options{absl::Seconds(10), 8, 8}, [&] { return now; });
  state.SetSelf(Node("a", 1));
  state.SetSelfLoad([] { return 5u; });
  ASSERT_TRUE(state.Join(Node("b", 1), 3).ok());
  ASSERT_TRUE(state.Join(Node("c", 1), 0).ok());
  ASSERT_TRUE(state.Join(Node("d", 1), 0).ok());
  ASSERT_TRUE(state.PutModel(Record(), false).ok());
  StrategyOptions every_rank_reads_every_file;
  every_rank_reads_every_file.strategy = "replicate";
  auto planned = state.PlanFor("m", 4, every_rank_reads_every_file);
  ASSERT_TRUE(planned.ok()) << planned.status();
  auto servers_of = [&](int rank) {
    auto response = state.ResponseFor(**planned, rank);
    std::vector<std::string> nodes;
    if (!response.ok() || response->files().empty()) {
      ADD_FAILURE() << "rank " << rank << " reads no file";
      return nodes;
    }
    for (const v1::Endpoint& e : response->files(0).servers()) nodes.push_back(e.node());
    return nodes;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(servers_of(0), (V{"a", "c", "d", "b"}));
  EXPECT_EQ(servers_of(1), (V{"b", "c", "d", "a"}));
  EXPECT_EQ(servers_of(2), (V{"c", "d", "b", "a"}));
  EXPECT_EQ(servers_of(3), (V{"d", "c", "b", "a"})) << "ties (c, d) rotate with the rank";
  // Loads change between joins; the cached plan answers with the new order.
  ASSERT_TRUE(state.Join(Node("b", 1), 0).ok());
  ASSERT_TRUE(state.Join(Node("c", 1), 9).ok());
  EXPECT_EQ(servers_of(0), (V{"a", "b", "d", "c"}));
  // GetLayout (no rank): every server, least loaded first, ties by name.
  auto layout = state.LayoutFor("m");
  ASSERT_TRUE(layout.ok());
  V layout_order;
  for (const v1::Endpoint& e : layout->files(0).servers()) layout_order.push_back(e.node());
  EXPECT_EQ(layout_order, (V{"b", "d", "a", "c"}));
}

// "All slots" of a huge cluster has the cap an explicit world size has.
TEST_F(ClusterStateTest, WorldSizeZeroIsCappedLikeAnExplicitOne) {
  state_.SetSelf(Node("a", 1024));
  for (int i = 0; i < 1024; ++i) ASSERT_TRUE(state_.Join(Node(absl::StrCat("n", i), 1024)).ok());
  ASSERT_TRUE(state_.PutModel(Record(), false).ok());
  auto planned = state_.PlanFor("m", 0, StrategyOptions{});
  EXPECT_EQ(planned.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(planned.status().message().find("1049600 GPU slots, more than a plan of at most 1048576"),
            absl::string_view::npos)
      << planned.status();
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

TEST_F(ClusterStateTest, RegistrationsArePersistedOnceAndAFailedWriteChangesNothing) {
  FakeStore store;
  state_.AttachStore(&store);
  ASSERT_TRUE(state_.PutModel(Record("/models/m"), false).ok());
  ASSERT_TRUE(state_.PutModel(Record("/models/m"), false).ok());
  EXPECT_THAT(store.puts, ::testing::ElementsAre("/models/m")) << "the same record again is not rewritten";

  store.fail_with = absl::ResourceExhaustedError("writing /fake/models/m.pb.tmp: No space left on device");
  absl::Status replaced = state_.PutModel(Record("/models/other"), /*replace=*/true);
  EXPECT_EQ(replaced.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(replaced.message(),
              ::testing::HasSubstr("model m not registered: persisting it in state_dir /fake"));
  EXPECT_THAT(replaced.message(), ::testing::HasSubstr("No space left"));
  ASSERT_EQ(state_.Models().size(), 1u);
  EXPECT_EQ(state_.Models()[0].checkpoint_dir(), "/models/m") << "memory changed although the write failed";

  absl::Status removed = state_.RemoveModel("m");
  EXPECT_EQ(removed.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(state_.Models().size(), 1u) << "unregistered in memory although the removal was not persisted";
  store.fail_with = absl::OkStatus();
  ASSERT_TRUE(state_.RemoveModel("m").ok());
  EXPECT_THAT(store.removes, ::testing::ElementsAre("m"));
  EXPECT_TRUE(state_.Models().empty());
}

TEST_F(ClusterStateTest, RestoredModelsAreNotWrittenBackAndDoNotReplace) {
  FakeStore store;
  ASSERT_TRUE(state_.RestoreModel(Record("/models/m")).ok());
  state_.AttachStore(&store);
  EXPECT_EQ(state_.RestoreModel(Record("/models/other")).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(store.puts.empty());
  EXPECT_EQ(state_.Models().size(), 1u);
}

TEST_F(ClusterStateTest, SyncedMembersAreExactlyTheListedOnesPlusSelf) {
  state_.SetSelf(Node("a", 2));
  state_.SyncMembers({Node("b", 2), Node("c", 2)});
  auto names = [this] {
    std::vector<std::string> out;
    for (const v1::NodeInfo& m : state_.Members()) out.push_back(m.name());
    return out;
  };
  EXPECT_THAT(names(), ::testing::ElementsAre("a", "b", "c"));
  state_.SyncMembers({Node("c", 2)});
  EXPECT_THAT(names(), ::testing::ElementsAre("a", "c"))
      << "a member gone from the registry is dropped at once";
  v1::NodeInfo impostor = Node("a", 8);
  impostor.set_address("10.9.9.9:7070");
  state_.SyncMembers({impostor, Node("c", 2)});
  ASSERT_EQ(state_.Members().size(), 2u);
  EXPECT_EQ(state_.Members()[0].gpu_count(), 2) << "this daemon's own entry is never replaced";
  now_ += absl::Seconds(11);
  EXPECT_THAT(names(), ::testing::ElementsAre("a")) << "members not synced for member_timeout expire";
}

TEST_F(ClusterStateTest, AppliedModelsReplaceWithoutWritingAndTheSameRecordKeepsCachedPlans) {
  FakeStore store;
  state_.SetSelf(Node("a", 2));
  state_.AttachStore(&store);
  ASSERT_TRUE(state_.ApplyModel(Record("/models/m")).ok());
  auto first = state_.PlanFor("m", 2, StrategyOptions{});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(state_.ApplyModel(Record("/models/m")).ok());
  auto again = state_.PlanFor("m", 2, StrategyOptions{});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(first->get(), again->get()) << "the same record again must not invalidate plans";
  ASSERT_TRUE(state_.ApplyModel(Record("/models/other")).ok()) << "another peer replaced it";
  EXPECT_EQ(state_.Models()[0].checkpoint_dir(), "/models/other");
  EXPECT_TRUE(state_.DropModel("m"));
  EXPECT_FALSE(state_.DropModel("m"));
  EXPECT_TRUE(state_.Models().empty());
  EXPECT_TRUE(store.puts.empty() && store.removes.empty()) << "what peers wrote is not written back";
}

}  // namespace
}  // namespace metaload
