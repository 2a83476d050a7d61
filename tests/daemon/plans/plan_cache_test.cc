// Plans computed once per model version, options, world and members, and each rank answered
// with only its part and a few servers, the least loaded first (issues 9 and 12).
#include "daemon/plans/plan_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "daemon/membership/membership.h"
#include "daemon/plans/plan_digest.h"
#include "daemon/registry/model_registry.h"
#include "metaload/errors.h"
#include "tests/daemon/model_records.h"

namespace metaload {
namespace {

using ::metaload::testing::Node;
using ::metaload::testing::TiedModel;

// What a coordinator plans from: its members, its models, its cached plans.
class PlanCacheTest : public ::testing::Test {
 protected:
  absl::StatusOr<std::shared_ptr<const PlannedModel>> PlanFor(const std::string& name, int world_size,
                                                              const StrategyOptions& options) {
    absl::StatusOr<std::shared_ptr<const RegisteredModel>> model = registry_.Find(name);
    if (!model.ok()) return model.status();
    return plans_.Get(*std::move(model), members_.Live(), world_size, options);
  }
  // What GetPlan answers `rank`, with `servers_per_file` servers at most.
  absl::StatusOr<v1::GetPlanResponse> Answer(const PlannedModel& planned, int rank,
                                             int servers_per_file = 2) {
    return RankAnswer(planned.plan, planned.tables, rank, members_.LoadsOf(planned.members),
                      servers_per_file);
  }
  absl::StatusOr<v1::GetLayoutResponse> Layout(const std::string& name) {
    absl::StatusOr<std::shared_ptr<const RegisteredModel>> model = registry_.Find(name);
    if (!model.ok()) return model.status();
    const std::vector<NodeSpec> live = members_.Live();
    return LayoutAnswer((*model)->record, PlanFilesOf((*model)->record, live), live, members_.LoadsOf(live));
  }
  absl::Status Put(const v1::ModelRecord& record, RecordOrigin origin) {
    return registry_.Put(::metaload::testing::Plain(record), origin);
  }
  absl::Status Register(const v1::ModelRecord& record) { return Put(record, RecordOrigin::kRegister); }

  absl::Time now_ = absl::FromUnixSeconds(1'000'000);
  Membership members_{Membership::Options{absl::Seconds(10)}, [this] { return now_; }};
  ModelRegistry registry_{ModelRegistry::Options{}};
  PlanCache plans_{PlanCache::Options{}};
};

TEST_F(PlanCacheTest, APlanIsComputedOnceAndRecomputedWhenMembersChange) {
  members_.SetSelf(Node("a", 2));
  ASSERT_TRUE(Register(TiedModel()).ok());
  auto first = PlanFor("m", 2, StrategyOptions{});
  auto second = PlanFor("m", 2, StrategyOptions{});
  ASSERT_TRUE(first.ok() && second.ok()) << first.status();
  EXPECT_EQ(first->get(), second->get());
  ASSERT_TRUE(members_.Join(Node("b", 2)).ok());
  auto third = PlanFor("m", 2, StrategyOptions{});
  ASSERT_TRUE(third.ok());
  EXPECT_NE(first->get(), third->get());
  StrategyOptions fp32;
  fp32.load_dtype = DType::kF32;
  auto converted = PlanFor("m", 2, fp32);
  ASSERT_TRUE(converted.ok());
  EXPECT_NE((*converted)->digest, (*third)->digest) << "options are part of the digest";
  EXPECT_EQ((*third)->digest, PlanDigest((*third)->plan, StrategyOptions{}));
  EXPECT_EQ((*third)->plan.Expand().ranks.size(), 2u);
}

// `register --digest` (issue 12): a record differing only in its digests is the same
// registration made anew (no --replace); the digests reach GetLayout and every rank's items,
// sliced ones too (serialized whole once per plan), and survive the rank's parse.
TEST_F(PlanCacheTest, DigestsReplaceWithoutReplaceAndReachLayoutAndEveryRanksItems) {
  members_.SetSelf(Node("a", 2));
  ASSERT_TRUE(Register(TiedModel()).ok());
  v1::ModelRecord digested = TiedModel();
  for (int i = 0; i < digested.tensors_size(); ++i) {
    testing::SetFakeDigest(digested.mutable_tensors(i), static_cast<uint16_t>(100 + i));
  }
  ASSERT_TRUE(Register(digested).ok()) << "adding digests needs no --replace";
  EXPECT_TRUE(Register(digested).ok()) << "the same again is idempotent";
  absl::StatusOr<v1::GetLayoutResponse> layout = Layout("m");
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->tensors_size(), 3);
  EXPECT_TRUE(layout->tensors(1).has_digest());
  EXPECT_EQ(layout->tensors(1).digest().lanes(), digested.tensors(1).digest().lanes());
  absl::StatusOr<Checkpoint> checkpoint = CheckpointFromRecord(digested);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  ASSERT_NE(checkpoint->Find("layers.1.w"), nullptr);
  ASSERT_TRUE(checkpoint->Find("layers.1.w")->digest.has_value());
  EXPECT_EQ(checkpoint->Find("layers.1.w")->digest->lanes, digested.tensors(2).digest().lanes());
  EXPECT_EQ(checkpoint->Find("layers.1.w")->index, 2) << "its place in the record: every rank's slot for it";

  for (const char* strategy : {"layers", "fsdp"}) {
    StrategyOptions options;
    options.strategy = strategy;
    auto planned = PlanFor("m", 2, options);
    ASSERT_TRUE(planned.ok()) << strategy << ": " << planned.status();
    int items = 0;
    for (int rank = 0; rank < 2; ++rank) {
      auto response = Answer(**planned, rank);
      ASSERT_TRUE(response.ok()) << response.status();
      absl::StatusOr<Plan> parsed = PlanFromProto(response->plan());
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      for (const ReadItem& item : parsed->ranks[0].items) {
        const TensorLayout* stored = checkpoint->Find(item.tensor);
        if (stored == nullptr) continue;  // the tied alias
        EXPECT_EQ(item.stored_digest, stored->digest) << strategy << " " << item.tensor;
        EXPECT_EQ(item.stored_index, stored->index) << strategy << " " << item.tensor;
        ++items;
      }
    }
    EXPECT_GE(items, 3) << strategy;
  }
  auto plain = PlanFor("m", 2, StrategyOptions{});
  ASSERT_TRUE(Register(TiedModel()).ok()) << "dropping digests needs no --replace";
  auto after = PlanFor("m", 2, StrategyOptions{});
  ASSERT_TRUE(plain.ok() && after.ok());
  EXPECT_NE((*plain)->digest, (*after)->digest) << "a plan with digests is another plan";
  EXPECT_FALSE(Layout("m")->tensors(0).has_digest());
}

TEST_F(PlanCacheTest, LayoutsCarryTheFilesAsRegistered) {
  members_.SetSelf(Node("a", 1));
  ASSERT_TRUE(Register(TiedModel()).ok());  // no stats: unchecked
  absl::StatusOr<v1::GetLayoutResponse> layout = Layout("m");
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->checkpoint_dir(), "/models/m");
  ASSERT_EQ(layout->files_size(), 3);
  for (const v1::FileSource& f : layout->files()) {
    EXPECT_EQ(f.registered_size_bytes(), 0u) << f.file();
    EXPECT_EQ(f.registered_mtime_ns(), 0) << f.file();
  }
  const v1::ModelRecord stated = ::metaload::testing::StatedModel();
  ASSERT_TRUE(Register(stated).ok()) << "a refresh needs no --replace";
  layout = Layout("m");
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->files_size(), 3);
  EXPECT_EQ(layout->files(1).file(), "model-1.safetensors");
  EXPECT_EQ(layout->files(1).registered_size_bytes(), 1001u);
  EXPECT_EQ(layout->files(1).registered_mtime_ns(), 1796054400000000001);
}

TEST_F(PlanCacheTest, EachRankIsAnsweredWithOnlyItsPartAndAFewServers) {
  members_.SetSelf(Node("a", 1));
  for (const char* n : {"b", "c", "d"}) ASSERT_TRUE(members_.Join(Node(n, 1)).ok());
  ASSERT_TRUE(Register(TiedModel()).ok());
  auto planned = PlanFor("m", 4, StrategyOptions{});
  ASSERT_TRUE(planned.ok()) << planned.status();
  std::set<std::string> digests;
  for (int rank = 0; rank < 4; ++rank) {
    auto response = Answer(**planned, rank);
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
  EXPECT_EQ(Answer(**planned, 4).status().code(), absl::StatusCode::kInvalidArgument);
  v1::GetPlanResponse whole =
      WholePlanAnswer((*planned)->plan, (*planned)->tables, (*planned)->model->record.skeleton_json);
  EXPECT_EQ(whole.plan().ranks_size(), 4);
  EXPECT_EQ(whole.files_size(), 3);
  EXPECT_EQ(whole.files(0).servers_size(), 4) << "the whole plan lists every server";
  EXPECT_FALSE(whole.skeleton_json().empty());
}

// Failover (issue 12): a rank gets every server of a file (a handful), its own node's first, the
// others by their load when it asks, ties rotated by rank.
TEST_F(PlanCacheTest, OtherServersAreListedLeastLoadedFirstAtAnswerTime) {
  members_.SetSelf(Node("a", 1));
  members_.SetSelfLoad([] { return 5u; });
  ASSERT_TRUE(members_.Join(Node("b", 1), 3).ok());
  ASSERT_TRUE(members_.Join(Node("c", 1), 0).ok());
  ASSERT_TRUE(members_.Join(Node("d", 1), 0).ok());
  ASSERT_TRUE(Register(TiedModel()).ok());
  StrategyOptions every_rank_reads_every_file;
  every_rank_reads_every_file.strategy = "replicate";
  auto planned = PlanFor("m", 4, every_rank_reads_every_file);
  ASSERT_TRUE(planned.ok()) << planned.status();
  auto servers_of = [&](int rank) {
    auto response = Answer(**planned, rank, 8);
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
  ASSERT_TRUE(members_.Join(Node("b", 1), 0).ok());
  ASSERT_TRUE(members_.Join(Node("c", 1), 9).ok());
  EXPECT_EQ(servers_of(0), (V{"a", "b", "d", "c"}));
  // GetLayout (no rank): every server, least loaded first, ties by name.
  auto layout = Layout("m");
  ASSERT_TRUE(layout.ok());
  V layout_order;
  for (const v1::Endpoint& e : layout->files(0).servers()) layout_order.push_back(e.node());
  EXPECT_EQ(layout_order, (V{"b", "d", "a", "c"}));
}

// "All slots" of a huge cluster has the cap an explicit world size has.
TEST_F(PlanCacheTest, WorldSizeZeroIsCappedLikeAnExplicitOne) {
  members_.SetSelf(Node("a", 1024));
  for (int i = 0; i < 1024; ++i) ASSERT_TRUE(members_.Join(Node(absl::StrCat("n", i), 1024)).ok());
  ASSERT_TRUE(Register(TiedModel()).ok());
  auto planned = PlanFor("m", 0, StrategyOptions{});
  EXPECT_EQ(planned.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(planned.status().message().find("1049600 GPU slots, more than a plan of at most 1048576"),
            absl::string_view::npos)
      << planned.status();
}

TEST_F(PlanCacheTest, ASharedRecordAppliedAgainKeepsCachedPlans) {
  members_.SetSelf(Node("a", 2));
  ASSERT_TRUE(Put(TiedModel(), RecordOrigin::kSharedRegistry).ok());
  auto first = PlanFor("m", 2, StrategyOptions{});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(Put(TiedModel(), RecordOrigin::kSharedRegistry).ok());
  auto again = PlanFor("m", 2, StrategyOptions{});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(first->get(), again->get()) << "the same record again must not invalidate plans";
}

}  // namespace
}  // namespace metaload

namespace metaload {
namespace {

// TiedModel as registered (the registry may go: the model is shared).
std::shared_ptr<const RegisteredModel> RegisteredTiedModel() {
  ModelRegistry registry{ModelRegistry::Options{}};
  const absl::Status put =
      registry.Put(::metaload::testing::Plain(::metaload::testing::TiedModel()), RecordOrigin::kRegister);
  EXPECT_TRUE(put.ok()) << put;
  return *registry.Find("m");
}

// Issue 23: a token holder's 256 fake members and 8 world sizes made the cache hold 8 plans of
// ~290 MiB each. The cache is bounded in bytes too.
TEST(PlanCacheBytes, TheCacheHoldsAtMostMaxBytesOfPlansButAlwaysTheNewest) {
  const auto model = RegisteredTiedModel();
  std::vector<NodeSpec> members;
  for (int i = 0; i < 64; ++i) members.push_back(::metaload::testing::Node(absl::StrCat("n", i), 8));
  PlanCache unbounded{PlanCache::Options{}};
  auto one = unbounded.Get(model, members, 512, StrategyOptions{});
  ASSERT_TRUE(one.ok()) << one.status();
  const uint64_t plan_bytes = HeldBytes(**one);
  EXPECT_GT(plan_bytes, 512u * sizeof(CompactRank)) << "every rank is counted";
  EXPECT_EQ(unbounded.held_bytes(), plan_bytes);

  // A plan in construction counts as its bound: room for two plans and one being built holds
  // three once it is built.
  const uint64_t bound = PlanBytesBound(*model, members, 512);
  ASSERT_GT(bound, plan_bytes);
  const uint64_t max_bytes = 2 * plan_bytes + bound;
  PlanCache bounded{PlanCache::Options{.cached_plans = 8, .max_bytes = max_bytes}};
  for (int world = 505; world <= 512; ++world) {
    ASSERT_TRUE(bounded.Get(model, members, world, StrategyOptions{}).ok()) << world;
    EXPECT_LE(bounded.held_bytes(), max_bytes) << world;
  }
  EXPECT_EQ(bounded.plans(), 3u) << "8 plans asked for, 3 fit";
  PlanCache one_plan{PlanCache::Options{.cached_plans = 8, .max_bytes = bound}};
  ASSERT_TRUE(one_plan.Get(model, members, 512, StrategyOptions{}).ok());
  ASSERT_TRUE(one_plan.Get(model, members, 511, StrategyOptions{}).ok());
  EXPECT_EQ(one_plan.plans(), 1u) << "the newest stays";
}

// Issue 35: a plan for a world of 2^20 ranks on a 23-tensor model took 56-71 s and 2.46 GiB,
// and plan_cache_size counted it only once it was built. Its bound is known before it is built:
// a plan that could never be held is refused at once, and nothing is kept.
TEST(PlanCacheBytes, APlanWhoseBoundIsOverMaxBytesIsRefusedBeforeItIsBuilt) {
  const auto model = RegisteredTiedModel();
  std::vector<NodeSpec> members;
  for (int i = 0; i < 1024; ++i) members.push_back(::metaload::testing::Node(absl::StrCat("n", i), 1024));
  const int world = 1 << 20;
  PlanCache plans{PlanCache::Options{.max_bytes = 16ull << 20}};  // plan_cache_size's least
  const absl::Time start = absl::Now();
  auto refused = plans.Get(model, members, world, StrategyOptions{.strategy = "fsdp"});
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(KindOf(refused.status()), ErrorKind::kBadInput) << "trying again does not help";
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::AllOf(::testing::HasSubstr("a plan of m for 1048576 ranks ("),
                               ::testing::HasSubstr("more than plan_cache_size (16.00 MiB)"),
                               ::testing::HasSubstr("raise plan_cache_size")));
  EXPECT_LT(took, absl::Milliseconds(500)) << "refused from sizes, not built";
  EXPECT_EQ(plans.plans(), 0u);
  EXPECT_EQ(plans.held_bytes(), 0u);
}

// The bound is over what every strategy's plan holds, and not far over it for the one whose
// ranks refer to every tensor (fsdp): a bound far too high would refuse plans that fit.
TEST(PlanCacheBytes, TheBoundIsOverEveryStrategysPlanAndNearTheLargest) {
  const auto model = RegisteredTiedModel();
  std::vector<NodeSpec> members;
  for (int i = 0; i < 16; ++i) members.push_back(::metaload::testing::Node(absl::StrCat("n", i), 8));
  for (const char* strategy : {"layers", "fsdp", "replicate"}) {
    for (int world : {1, 8, 128}) {
      auto planned = PlanModel(model, members, world, StrategyOptions{.strategy = strategy});
      ASSERT_TRUE(planned.ok()) << strategy << " " << world << ": " << planned.status();
      const uint64_t held = HeldBytes(**planned);
      const uint64_t bound = PlanBytesBound(*model, members, world);
      EXPECT_GE(bound, held) << strategy << " at " << world;
      if (std::string(strategy) == "fsdp" && world == 128) EXPECT_LT(bound, 3 * held) << bound << " " << held;
    }
  }
}

}  // namespace
}  // namespace metaload
