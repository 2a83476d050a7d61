// A rank's fan-out part on the wire (proto/fanout_wire.h): what a coordinator sends round-trips,
// and every way a hostile or mistaken answer could make a rank wait for, or send to, the wrong
// ranks is refused at the edge, naming what is wrong.
#include "proto/fanout_wire.h"

#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaload {
namespace {

using ::testing::HasSubstr;

// Rank 1 of 4: items 0 and 2 are pieces (read by rank 0 in group {0, 1}, and by rank 1 in
// group {1, 3}); item 1 is its own.
v1::FanoutPart Valid() {
  FanoutPart part;
  part.piece_of_item = {0, -1, 1};
  part.pieces = {FanoutPiece{0, 0, 100}, FanoutPiece{1, 1, 100}};
  part.groups = {{0, 1}, {1, 3}};
  part.group_ids = {2, 7};
  v1::FanoutPart proto;
  FanoutPartToProto(part, &proto);
  return proto;
}

const std::vector<uint64_t> kItemBytes = {100, 8, 100};  // its pieces alike: a swap keeps sizes

TEST(FanoutWireTest, APartRoundTrips) {
  absl::StatusOr<FanoutPart> part = FanoutPartFromProto(Valid(), 1, 4, kItemBytes);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ(part->piece_of_item, (std::vector<int32_t>{0, -1, 1}));
  EXPECT_EQ(part->groups, (std::vector<std::vector<int>>{{0, 1}, {1, 3}}));
  EXPECT_EQ(part->group_ids, (std::vector<int>{2, 7}));
  ASSERT_EQ(part->pieces.size(), 2u);
  EXPECT_EQ(part->pieces[1].group, 1);
  EXPECT_EQ(part->pieces[1].reader, 1);
  EXPECT_EQ(part->pieces[1].size_bytes, 100u);
  // An item read by the rank itself is one byte on the wire.
  FanoutPart unshared;
  unshared.piece_of_item.assign(1000, -1);
  v1::FanoutPart wire;
  FanoutPartToProto(unshared, &wire);
  EXPECT_LE(wire.ByteSizeLong(), 1000u + 8);
  // Nothing shared: an empty part.
  absl::StatusOr<FanoutPart> none = FanoutPartFromProto(v1::FanoutPart(), 0, 4, {});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
}

TEST(FanoutWireTest, EveryWrongPartIsRefusedNamingWhy) {
  struct Case {
    std::string name;
    std::function<void(v1::FanoutPart&)> spoil;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"an item more", [](v1::FanoutPart& p) { p.add_piece_of_item(0); }, "4 items for a plan of 3"},
      {"more pieces than items",
       [](v1::FanoutPart& p) {
         for (int i = 0; i < 2; ++i) *p.add_pieces() = p.pieces(0);
       },
       "4 pieces and 2 groups for 3 items"},
      {"a piece past the end", [](v1::FanoutPart& p) { p.set_piece_of_item(1, 3); },
       "item 1 names piece 2 of 2"},
      {"the worst index", [](v1::FanoutPart& p) { p.set_piece_of_item(0, UINT32_MAX); },
       "item 0 names piece 4294967294 of 2"},
      {"a piece of another size", [](v1::FanoutPart& p) { p.mutable_pieces(0)->set_size_bytes(UINT64_MAX); },
       "piece 0 is 18446744073709551615 bytes, its item 0 100"},
      {"a piece twice", [](v1::FanoutPart& p) { p.set_piece_of_item(2, 1); }, "piece 0 is held by 2 items"},
      {"a piece of no item", [](v1::FanoutPart& p) { p.set_piece_of_item(2, 0); },
       "piece 1 is held by 0 items"},
      {"a group past the end", [](v1::FanoutPart& p) { p.mutable_pieces(1)->set_group(2); },
       "piece 1 names group 2 of 2"},
      {"a negative group", [](v1::FanoutPart& p) { p.mutable_pieces(1)->set_group(-1); }, "names group -1"},
      {"a reader outside its group", [](v1::FanoutPart& p) { p.mutable_pieces(0)->set_reader(3); },
       "piece 0's reader 3 is not a member"},
      {"ids out of order", [](v1::FanoutPart& p) { p.mutable_groups(1)->set_id(2); }, "group 1 has id 2"},
      {"a negative id", [](v1::FanoutPart& p) { p.mutable_groups(0)->set_id(-1); }, "group 0 has id -1"},
      {"a group without this rank", [](v1::FanoutPart& p) { p.mutable_groups(1)->set_members(0, 2); },
       "group 7 is not 2 or more ascending ranks of 4 holding rank 1"},
      {"a group of one", [](v1::FanoutPart& p) { p.mutable_groups(0)->mutable_members()->RemoveLast(); },
       "group 2 is not 2 or more"},
      {"members out of order", [](v1::FanoutPart& p) { p.mutable_groups(1)->set_members(1, 0); },
       "group 7 is not 2 or more ascending"},
      {"a member twice", [](v1::FanoutPart& p) { p.mutable_groups(1)->set_members(0, 3); },
       "group 7 is not 2 or more ascending"},
      {"a member outside the world", [](v1::FanoutPart& p) { p.mutable_groups(1)->set_members(1, 4); },
       "group 7 is not 2 or more ascending ranks of 4"},
      {"a negative member", [](v1::FanoutPart& p) { p.mutable_groups(0)->set_members(0, -1); },
       "group 2 is not 2 or more ascending"},
      {"more members than the world",
       [](v1::FanoutPart& p) {
         for (int m : {4, 5, 6}) p.mutable_groups(1)->add_members(m);
       },
       "group 7 is not 2 or more ascending ranks of 4"},
  };
  for (const Case& c : cases) {
    v1::FanoutPart proto = Valid();
    c.spoil(proto);
    absl::StatusOr<FanoutPart> part = FanoutPartFromProto(proto, 1, 4, kItemBytes);
    ASSERT_FALSE(part.ok()) << c.name;
    EXPECT_EQ(part.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(part.status().message(), HasSubstr(c.message)) << c.name;
    EXPECT_THAT(part.status().message(), HasSubstr("the fan-out part: ")) << c.name;
  }
}

}  // namespace
}  // namespace metaload
