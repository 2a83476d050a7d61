// Who is in the cluster: members that expire, names that cannot be taken over, members that
// leave, and the members a shared registry lists (issue 9).
#include "daemon/membership/membership.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "daemon/requests/request_limits.h"
#include "tests/daemon/model_records.h"

namespace metaload {
namespace {

using ::metaload::testing::Node;

class MembershipTest : public ::testing::Test {
 protected:
  std::vector<std::string> LiveNames() const {
    std::vector<std::string> names;
    for (const NodeSpec& n : members_.Live()) names.push_back(n.name);
    return names;
  }

  std::vector<MemberStatus> States() const { return members_.States(1024, 1 << 20).listed; }

  absl::Time now_ = absl::FromUnixSeconds(1'000'000);
  Membership members_{Membership::Options{absl::Seconds(10)}, [this] { return now_; }};
};

TEST_F(MembershipTest, MembersThatStopRejoiningExpireButTheCoordinatorNever) {
  members_.SetSelf(Node("a", 1));
  ASSERT_TRUE(members_.Join(Node("b", 1)).ok());
  EXPECT_EQ(members_.Live().size(), 2u);
  now_ += absl::Seconds(9);
  ASSERT_EQ(*members_.Join(Node("c", 1)), true);
  now_ += absl::Seconds(2);  // b last seen 11 s ago, c 2 s ago
  EXPECT_EQ(LiveNames(), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(*members_.Join(Node("b", 1)), true) << "b came back";
  EXPECT_EQ(*members_.Join(Node("b", 1)), false) << "a refresh, not a new member";
}

TEST_F(MembershipTest, StatusRemembersMembersThatAreDownOrLeftWithTheirAge) {
  members_.SetSelf(Node("a", 1));
  ASSERT_TRUE(members_.Join(Node("b", 1)).ok());
  ASSERT_TRUE(members_.Join(Node("c", 1)).ok());
  ASSERT_TRUE(members_.Join(Node("d", 1)).ok());
  now_ += absl::Seconds(4);
  ASSERT_TRUE(members_.Join(Node("c", 1)).ok());
  ASSERT_TRUE(members_.Join(Node("d", 1)).ok());
  NodeSpec other_d = Node("d", 1);
  other_d.address = "evil:7070";
  EXPECT_EQ(members_.Leave(other_d).code(), absl::StatusCode::kInvalidArgument)
      << "only the daemon that joined under a name may take it out of plans";
  EXPECT_EQ(members_.Leave(Node("a", 1)).code(), absl::StatusCode::kNotFound)
      << "the coordinator never leaves";
  EXPECT_EQ(members_.Leave(Node("x", 1)).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(members_.Leave(Node("d", 1)).ok());
  now_ += absl::Seconds(7);  // b last seen 11 s ago, c and d 7 s ago
  std::vector<std::string> rows;
  for (const MemberStatus& m : States()) {
    rows.push_back(absl::StrCat(m.node.name, " ", m.state, " ", absl::FormatDuration(m.since_seen)));
  }
  EXPECT_EQ(rows, (std::vector<std::string>{"a 0 0", "b 1 11s", "c 0 7s", "d 2 7s"}));
  EXPECT_EQ(LiveNames(), (std::vector<std::string>{"a", "c"})) << "down and left members are out of plans";
  EXPECT_EQ(*members_.Join(Node("d", 1)), true) << "a member that left comes back by joining";
}

TEST_F(MembershipTest, NewlyDownNamesEachMemberOnceAsItGoesDownAgainAfterItCameBack) {
  members_.SetSelf(Node("a", 1));
  ASSERT_TRUE(members_.Join(Node("b", 1)).ok());
  ASSERT_TRUE(members_.Join(Node("c", 1)).ok());
  ASSERT_TRUE(members_.Join(Node("d", 1)).ok());
  members_.RestoreBinding("e", "token");
  EXPECT_TRUE(members_.NewlyDown().empty()) << "a restored binding is not a member gone down";
  ASSERT_TRUE(members_.Leave(Node("d", 1)).ok());
  now_ += absl::Seconds(10);
  EXPECT_TRUE(members_.NewlyDown().empty()) << "member_timeout not yet past";
  ASSERT_TRUE(members_.Join(Node("c", 1)).ok());
  now_ += absl::Seconds(1);
  EXPECT_EQ(members_.NewlyDown(), std::vector<std::string>{"b"}) << "d left: its own line says so";
  EXPECT_TRUE(members_.NewlyDown().empty()) << "once";
  ASSERT_EQ(*members_.Join(Node("b", 1)), true);
  now_ += absl::Seconds(11);
  EXPECT_EQ(members_.NewlyDown(), (std::vector<std::string>{"b", "c"})) << "b went down again";
  members_.Sync({Node("b", 1)});
  EXPECT_TRUE(members_.NewlyDown().empty()) << "c was named already";
  members_.Sync({});
  EXPECT_EQ(members_.NewlyDown(), std::vector<std::string>{"b"}) << "no longer listed by the shared registry";
}

TEST_F(MembershipTest, ANameTakenByALiveMemberOrTheCoordinatorIsRefused) {
  members_.SetSelf(Node("a", 1));
  NodeSpec impostor = Node("a", 1);
  impostor.address = "evil:7070";
  EXPECT_EQ(members_.Join(impostor).status().code(), absl::StatusCode::kInvalidArgument);
  impostor.address = "a:7070";
  EXPECT_EQ(members_.Join(impostor).status().code(), absl::StatusCode::kInvalidArgument)
      << "the coordinator's own entry cannot be replaced";
  ASSERT_TRUE(members_.Join(Node("b", 1)).ok());
  NodeSpec other = Node("b", 1);
  other.address = "10.0.0.9:7070";
  EXPECT_EQ(members_.Join(other).status().code(), absl::StatusCode::kInvalidArgument);
  now_ += absl::Seconds(11);
  EXPECT_TRUE(members_.Join(other).ok()) << "once expired, the name is free";
}

// Issue 23: after `kill -9` of node-b, a stranger's certificate joined as node-b, and the real
// node-b was then refused. The name stays its first identity's, down or not, until released.
TEST_F(MembershipTest, ANameStaysItsIdentitysAfterItExpiresUntilReleased) {
  members_.SetSelf(Node("a", 1));
  ASSERT_TRUE(members_.Join(Node("b", 1), 0, "cert:node-b").ok());
  now_ += absl::Seconds(11);  // b was killed: down
  absl::StatusOr<bool> stranger = members_.Join(Node("b", 1), 0, "token:member:stranger.token");
  EXPECT_EQ(stranger.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(
      stranger.status().message(),
      ::testing::HasSubstr("node \"b\" joined as cert:node-b; a Join as token:member:stranger.token may "
                           "not take it (it is down, not released)"));
  EXPECT_EQ(*members_.Join(Node("b", 1), 0, "cert:node-b"), true) << "the real b comes back";
  ASSERT_TRUE(members_.Leave(Node("b", 1), "cert:node-b").ok());
  EXPECT_EQ(members_.Join(Node("b", 1), 0, "stranger").status().code(), absl::StatusCode::kPermissionDenied)
      << "leaving does not give the name away";
  EXPECT_EQ(members_.Release("x").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(members_.Release("a").code(), absl::StatusCode::kNotFound) << "the coordinator's own";
  ASSERT_TRUE(members_.Release("b").ok());
  EXPECT_EQ(*members_.Join(Node("b", 1), 0, "stranger"), true) << "released: anyone may take it";
}

// After a restart of the coordinator (binding_store.h): a bound name is down, and only its
// identity takes it back.
TEST_F(MembershipTest, ARestoredBindingIsDownAndOnlyItsIdentityTakesTheName) {
  members_.SetSelf(Node("a", 1));
  members_.RestoreBinding("b", "token:member:node-b.token");
  members_.RestoreBinding("a", "token:member:mallory.token");  // the coordinator's own: ignored
  EXPECT_THAT(LiveNames(), ::testing::ElementsAre("a"));
  ASSERT_EQ(States().size(), 2u);
  EXPECT_EQ(States()[1].state, MemberStatus::kDown);
  EXPECT_EQ(members_.BoundIdentity("b"), "token:member:node-b.token");
  EXPECT_EQ(members_.BoundIdentity("a"), std::nullopt);
  EXPECT_EQ(members_.BoundIdentity("c"), std::nullopt);
  absl::StatusOr<bool> stranger = members_.Join(Node("b", 1), 0, "token:member:stranger.token");
  EXPECT_EQ(stranger.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(stranger.status().message(),
              ::testing::HasSubstr("node \"b\" joined as token:member:node-b.token; a Join as "
                                   "token:member:stranger.token may not take it (it is down, not released)"));
  EXPECT_EQ(*members_.Join(Node("b", 1), 0, "token:member:node-b.token"), true);
  EXPECT_THAT(LiveNames(), ::testing::ElementsAre("a", "b"));
  members_.RestoreBinding("b", "token:member:stranger.token");  // a name already known stays
  EXPECT_EQ(members_.BoundIdentity("b"), "token:member:node-b.token");
  ASSERT_TRUE(members_.Release("b").ok());
  EXPECT_EQ(members_.BoundIdentity("b"), std::nullopt);
}

TEST_F(MembershipTest, SyncedMembersAreExactlyTheListedOnesPlusSelf) {
  members_.SetSelf(Node("a", 2));
  members_.Sync({Node("b", 2), Node("c", 2)});
  EXPECT_THAT(LiveNames(), ::testing::ElementsAre("a", "b", "c"));
  members_.Sync({Node("c", 2)});
  EXPECT_THAT(LiveNames(), ::testing::ElementsAre("a", "c"))
      << "a member gone from the registry is dropped at once";
  NodeSpec impostor = Node("a", 8);
  impostor.address = "10.9.9.9:7070";
  members_.Sync({impostor, Node("c", 2)});
  ASSERT_EQ(members_.Live().size(), 2u);
  EXPECT_EQ(members_.Live()[0].gpu_count, 2) << "this daemon's own entry is never replaced";
  now_ += absl::Seconds(11);
  EXPECT_THAT(LiveNames(), ::testing::ElementsAre("a")) << "members not synced for member_timeout expire";
}

// Issue 35: 4,094 made-up names from one token filled the table, which then forgot every member
// that was down, binding included, and a stranger joined as node-b. A full table now refuses a
// new name, and every name stays bound.
TEST_F(MembershipTest, AFullTableRefusesANewNameAndForgetsNoBinding) {
  members_.SetSelf(Node("a", 1));
  ASSERT_TRUE(members_.Join(Node("b", 1), 0, "token:member:node-b.token").ok());
  now_ += absl::Seconds(11);  // b was killed: down
  for (int i = 0; i < kMaxMembers - 2; ++i) {
    ASSERT_TRUE(members_.Join(Node(absl::StrCat("x", i), 1), 0, absl::StrCat("cert:x", i)).ok()) << i;
  }
  now_ += absl::Seconds(11);  // the flood's names are down too
  absl::StatusOr<bool> more = members_.Join(Node("y", 1), 0, "token:member:stranger.token");
  EXPECT_EQ(more.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(
      more.status().message(),
      "the cluster has 4096 members, up or down, the most one coordinator keeps: a member's name stays its "
      "own while it is down; an admin frees one with `metactl release NAME`");
  EXPECT_EQ(members_.Join(Node("b", 1), 0, "token:member:stranger.token").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(members_.BoundIdentity("b"), "token:member:node-b.token");
  EXPECT_EQ(*members_.Join(Node("x7", 1), 0, "cert:x7"), true) << "a down member takes its own place back";
  EXPECT_EQ(*members_.Join(Node("b", 1), 0, "token:member:node-b.token"), true);
  ASSERT_TRUE(members_.Release("x0").ok());
  EXPECT_TRUE(members_.Join(Node("y", 1), 0, "token:member:stranger.token").ok()) << "a released place";
}

TEST(MembershipLimits, AnIdentityOfOneHolderHoldsAtMostMaxNamesPerIdentity) {
  Membership members(Membership::Options{.member_timeout = absl::Seconds(10), .max_names_per_identity = 2});
  members.SetSelf(Node("a", 1));
  members.RestoreBinding("b", "token:member:m.token");  // restored names count
  ASSERT_TRUE(members.Join(Node("c", 1), 0, "token:member:m.token").ok());
  absl::StatusOr<bool> third = members.Join(Node("d", 1), 0, "token:member:m.token");
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(third.status().message(),
            "token:member:m.token already holds 2 node names, up or down (max_names_per_identity in the "
            "coordinator's config); an admin frees one with `metactl release NAME`");
  EXPECT_TRUE(members.Join(Node("c", 1), 0, "token:member:m.token").ok()) << "a refresh is no new name";
  EXPECT_TRUE(members.Join(Node("d", 1), 0, "cert:node-d").ok()) << "another identity's";
  ASSERT_TRUE(members.Release("b").ok());
  EXPECT_TRUE(members.Join(Node("e", 1), 0, "token:member:m.token").ok()) << "released: one more";
  // Everyone with auth_token_file (or no credential) is the same identity: only the table bounds it.
  for (const char* shared : {"token", "anonymous"}) {
    for (int i = 0; i < 5; ++i) {
      EXPECT_TRUE(members.Join(Node(absl::StrCat(shared, i), 1), 0, shared).ok()) << shared << i;
    }
  }
}

TEST(MembershipLimits, MembersRootsTogetherStayUnderMaxRootsBytes) {
  Membership members(Membership::Options{.member_timeout = absl::Seconds(10), .max_roots_bytes = 1000});
  members.SetSelf(Node("a", 1, {std::string(100, 'a')}));
  ASSERT_TRUE(members.Join(Node("b", 1, {"/" + std::string(499, 'b')}), 0, "cert:b").ok());
  absl::StatusOr<bool> c = members.Join(Node("c", 1, {"/" + std::string(400, 'c')}), 0, "cert:c");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(c.status().message(),
            "node \"c\": its roots (401 bytes) would bring the members' roots to 1001 bytes, more than the "
            "1000 bytes "
            "the coordinator keeps for all members' roots together (each member's: at most 64 roots, 65536 "
            "bytes)");
  // b's own roots are replaced, not added to: b may grow to what is left beside a's.
  EXPECT_TRUE(members.Join(Node("b", 1, {"/" + std::string(899, 'b')}), 0, "cert:b").ok());
  EXPECT_FALSE(members.Join(Node("b", 1, {"/" + std::string(900, 'b')}), 0, "cert:b").ok());
  ASSERT_TRUE(members.Join(Node("b", 1, {"/b"}), 0, "cert:b").ok());
  EXPECT_TRUE(members.Join(Node("c", 1, {"/" + std::string(400, 'c')}), 0, "cert:c").ok());
  ASSERT_TRUE(members.Release("c").ok());
  EXPECT_TRUE(members.Join(Node("d", 1, {"/" + std::string(800, 'd')}), 0, "cert:d").ok())
      << "a release gives its roots' bytes back";
}

// Issue 35: one GetStatus of 4,000 members with 64 KB of roots each copied them all (1.4 GiB).
TEST_F(MembershipTest, StatesListsABoundedPrefixAndCountsEveryMember) {
  members_.SetSelf(Node("a", 1));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(members_.Join(Node(absl::StrCat("m", i), 1)).ok());
  ASSERT_TRUE(members_.Leave(Node("m0", 1)).ok());
  now_ += absl::Seconds(11);
  ASSERT_TRUE(members_.Join(Node("m9", 1)).ok());
  MemberStates few = members_.States(3, 1 << 20);
  ASSERT_EQ(few.listed.size(), 3u);
  EXPECT_EQ(few.listed[2].node.name, "m1");
  EXPECT_EQ(few.up, 2u);  // a and m9
  EXPECT_EQ(few.down, 8u);
  EXPECT_EQ(few.left, 1u);
  EXPECT_EQ(members_.States(1024, 1).listed.size(), 1u) << "at least one, whatever the bytes";
  NodeSpec wide = Node("m5", 1, {});
  for (int r = 0; r < 64; ++r) wide.roots.push_back(absl::StrCat("/", r, std::string(1000, 'r')));
  ASSERT_TRUE(members_.Join(wide).ok());
  // a, m0..m4 (~100 bytes each) fit in 32 KiB; m5's 64 KB of roots do not, nor does any after.
  MemberStates bounded = members_.States(1024, 32 << 10);
  ASSERT_EQ(bounded.listed.size(), 6u);
  EXPECT_EQ(bounded.listed.back().node.name, "m4");
  EXPECT_EQ(bounded.up + bounded.down + bounded.left, 11u);
}

}  // namespace
}  // namespace metaload
