// Who is in the cluster: members that expire, names that cannot be taken over, members that
// leave, and the members a shared registry lists (issue 9).
#include "daemon/membership/membership.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
  for (const MemberStatus& m : members_.States()) {
    rows.push_back(absl::StrCat(m.node.name, " ", m.state, " ", absl::FormatDuration(m.since_seen)));
  }
  EXPECT_EQ(rows, (std::vector<std::string>{"a 0 0", "b 1 11s", "c 0 7s", "d 2 7s"}));
  EXPECT_EQ(LiveNames(), (std::vector<std::string>{"a", "c"})) << "down and left members are out of plans";
  EXPECT_EQ(*members_.Join(Node("d", 1)), true) << "a member that left comes back by joining";
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
  ASSERT_EQ(members_.States().size(), 2u);
  EXPECT_EQ(members_.States()[1].state, MemberStatus::kDown);
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

}  // namespace
}  // namespace metaload
