// What a member may publish (issue 35): only what is registered on its own node — the name
// bound to its identity — from a folder under that node's roots.
#include "daemon/membership/node_restriction.h"

#include <gtest/gtest.h>

#include "tests/daemon/model_records.h"

namespace metaload {
namespace {

using ::metaload::testing::Node;
using ::metaload::testing::Plain;
using ::metaload::testing::TiedModel;

ModelRecord OnB(const std::string& dir = "/models/m") {
  v1::ModelRecord record = TiedModel(dir);
  record.set_registered_on("b");
  return Plain(record);
}

const BoundMember kB{"token:member:node-b.token", Node("b", 1, {"/models", "/scratch"})};

TEST(NodeRestrictionTest, AMemberPublishesFoldersUnderItsOwnNodesRoots) {
  EXPECT_TRUE(CheckMemberPublication(OnB(), "token:member:node-b.token", kB).ok());
  EXPECT_TRUE(CheckMemberPublication(OnB("/scratch"), "token:member:node-b.token", kB).ok())
      << "a root itself";
}

TEST(NodeRestrictionTest, ANameNoMemberHasIsRefused) {
  EXPECT_EQ(CheckMemberPublication(OnB(), "token:member:node-b.token", std::nullopt),
            absl::PermissionDeniedError(
                "PublishModel of model \"m\" registered on node \"b\": no member has that name; a member "
                "publishes only what is registered on its own node, once it joined"));
}

TEST(NodeRestrictionTest, AnotherMembersNodeIsRefused) {
  EXPECT_EQ(CheckMemberPublication(OnB(), "token:member:mallory.token", kB),
            absl::PermissionDeniedError(
                "PublishModel of model \"m\" registered on node \"b\": that node joined as "
                "token:member:node-b.token; this caller (token:member:mallory.token) publishes only what is "
                "registered on its own node"));
}

TEST(NodeRestrictionTest, AFolderOutsideTheRootsIsRefusedOnAComponentBoundary) {
  for (const char* dir : {"/etc", "/modelsx/m", "/"}) {
    EXPECT_EQ(CheckMemberPublication(OnB(dir), "token:member:node-b.token", kB),
              absl::PermissionDeniedError(absl::StrCat(
                  "PublishModel of model \"m\" registered on node \"b\": its folder \"", dir,
                  "\" is not under the node's roots (/models, /scratch); a member publishes only folders it "
                  "serves")))
        << dir;
  }
  const BoundMember restored{"token:member:node-b.token", Node("b", 0, {})};  // bound before a restart
  EXPECT_EQ(CheckMemberPublication(OnB(), "token:member:node-b.token", restored).code(),
            absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace metaload
