// What a daemon may stream of a registered model: only bytes inside its tensors, merged where
// tensors touch, with hostile offsets and strides refused rather than wrapped around; and how a
// node agent keeps what its coordinator told it.
#include "daemon/serving/served_ranges.h"

#include <gtest/gtest.h>

#include "daemon/serving/served_ranges_cache.h"

namespace metaload {
namespace {

TensorLayout At(const std::string& file, uint64_t begin, uint64_t end) {
  TensorLayout t;
  t.name = absl::StrCat(file, ":", begin);
  t.file = file;
  t.begin_offset = begin;
  t.end_offset = end;
  return t;
}

// x.safetensors: an 8-byte header, tensors [8, 24) and [24, 40) side by side, a gap, [48, 64).
ServedRanges Model() {
  Checkpoint checkpoint;
  checkpoint.dir = "/models/m";
  checkpoint.files = {"x.safetensors", "y.safetensors"};
  checkpoint.tensors = {At("x.safetensors", 48, 64), At("x.safetensors", 8, 24), At("x.safetensors", 24, 40),
                        At("y.safetensors", 100, 200)};
  return ServedRanges("m", checkpoint);
}

StridedRuns Contiguous(uint64_t offset, uint64_t length) { return StridedRuns{offset, length, length, 1}; }

constexpr char kX[] = "/models/m/x.safetensors";

TEST(ServedRanges, BytesInsideOneTensorAreServed) {
  EXPECT_TRUE(Model().Check(kX, Contiguous(8, 16)).ok());
  EXPECT_TRUE(Model().Check(kX, Contiguous(50, 4)).ok());
  EXPECT_TRUE(Model().Check("/models/m/y.safetensors", Contiguous(100, 100)).ok());
}

TEST(ServedRanges, ARangeSpanningTwoAdjacentTensorsIsServed) {
  EXPECT_TRUE(Model().Check(kX, Contiguous(8, 32)).ok());
  EXPECT_TRUE(Model().Check(kX, Contiguous(20, 10)).ok());
}

TEST(ServedRanges, HeaderBytesAreRefusedNamingThem) {
  absl::Status s = Model().Check(kX, Contiguous(0, 8));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "ReadRange: bytes [0, 8) of \"/models/m/x.safetensors\" are not inside a tensor of registered "
            "model \"m\"");
  EXPECT_EQ(Model().Check(kX, Contiguous(7, 2)).code(), absl::StatusCode::kPermissionDenied);
}

TEST(ServedRanges, TheGapBetweenTensorsAndOnePastTheEndAreRefused) {
  EXPECT_EQ(Model().Check(kX, Contiguous(36, 8)).code(),
            absl::StatusCode::kPermissionDenied);  // into the gap
  EXPECT_EQ(Model().Check(kX, Contiguous(40, 8)).code(),
            absl::StatusCode::kPermissionDenied);  // the gap alone
  EXPECT_TRUE(Model().Check(kX, Contiguous(48, 16)).ok());
  absl::Status s = Model().Check(kX, Contiguous(48, 17));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "ReadRange: bytes [48, 65) of \"/models/m/x.safetensors\" are not inside a tensor of "
            "registered model \"m\"");
  EXPECT_EQ(Model().Check(kX, Contiguous(64, 1)).code(), absl::StatusCode::kPermissionDenied);
}

TEST(ServedRanges, AFileTheModelDoesNotHoldIsRefused) {
  absl::Status s = Model().Check("/models/m/.env", Contiguous(0, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "ReadRange: \"/models/m/.env\" is not a file of registered model \"m\"");
  // Nothing asked: still refused, so that a file's existence is not told either.
  EXPECT_EQ(Model().Check("/models/m/.env", StridedRuns{}).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Model().Check("/models/m/../m/x.safetensors", Contiguous(8, 1)).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(Model().Check(kX, StridedRuns{}).ok());
}

TEST(ServedRanges, AnOffsetPlusLengthPast2To64IsRefusedNotWrapped) {
  absl::Status s = Model().Check(kX, Contiguous(~0ull - 3, 16));  // would wrap to [.., 12)
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("ends past 2^64 bytes"), absl::string_view::npos) << s.message();
}

TEST(ServedRanges, AStrideTimesCountPast2To64IsRefusedNotWrapped) {
  // Run 1 would start at 8 + 2^63 * 2 = 8 (mod 2^64): inside, if the product wrapped.
  absl::Status s = Model().Check(kX, StridedRuns{8, 4, 1ull << 63, 3});
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
}

TEST(ServedRanges, StridedRunsAreServedOnlyWhenEveryRunIsInside) {
  // Runs of 4 bytes every 8 from 8: 8..12, 16..20, 24..28, 32..36 — across the two tensors.
  EXPECT_TRUE(Model().Check(kX, StridedRuns{8, 4, 8, 4}).ok());
  // A fifth run, 40..44, lies in the gap.
  absl::Status s = Model().Check(kX, StridedRuns{8, 4, 8, 5});
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "ReadRange: bytes [40, 44) of \"/models/m/x.safetensors\" are not inside a tensor of "
            "registered model \"m\"");
  // Runs that skip the gap: 8, 24, 40 (gap) -> refused; 16, 32, 48 -> all inside.
  EXPECT_EQ(Model().Check(kX, StridedRuns{8, 8, 16, 3}).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(Model().Check(kX, StridedRuns{16, 8, 16, 3}).ok());
}

TEST(ServedRanges, ManyRunsAreCheckedByRangeNotOneByOne) {
  Checkpoint checkpoint;
  checkpoint.dir = "/m";
  checkpoint.tensors = {At("big", 0, 1ull << 40)};
  ServedRanges served("big", checkpoint);
  // 2^37 runs: checked one by one this would not finish.
  EXPECT_TRUE(served.Check("/m/big", StridedRuns{0, 4, 8, 1ull << 37}).ok());
  EXPECT_EQ(served.Check("/m/big", StridedRuns{0, 4, 8, (1ull << 37) + 1}).code(),
            absl::StatusCode::kPermissionDenied);
}

// The agent's cache, with a fake clock and a fetch that counts. `sent`: it answers records to
// check against the files (what a coordinator's GetLayout is), `end` the last tensor's end.
struct FakeCoordinator {
  absl::Time now = absl::FromUnixSeconds(1000);
  int fetches = 0;
  bool registered = true;
  bool reachable = true;
  bool sent = false;
  uint64_t end = 64;
  ServedRangesCache cache{[this](const std::string& model) -> absl::StatusOr<ServedRanges> {
                            ++fetches;
                            if (!reachable) return absl::UnavailableError("coordinator down");
                            if (!registered) return absl::NotFoundError("no model \"m\" is registered");
                            if (!sent) return Model();
                            auto checkpoint = std::make_shared<Checkpoint>();
                            checkpoint->dir = "/models/m";
                            checkpoint->tensors = {At("x.safetensors", 8, end)};
                            return ServedRanges("m", std::move(checkpoint), "coordinator c:1 (GetLayout)");
                          },
                          ServedRangesCache::Options{absl::Seconds(2), absl::Seconds(1)},
                          [this] { return now; }};
};

TEST(ServedRangesCache, AnswersFromOneFetchWhileFresh) {
  FakeCoordinator c;
  EXPECT_TRUE(c.cache.Check("m", kX, Contiguous(8, 8)).ok());
  EXPECT_TRUE(c.cache.Check("m", kX, Contiguous(48, 8)).ok());
  EXPECT_EQ(c.fetches, 1);
  c.now += absl::Seconds(3);
  EXPECT_TRUE(c.cache.Check("m", kX, Contiguous(8, 8)).ok());
  EXPECT_EQ(c.fetches, 2);
}

TEST(ServedRangesCache, AnUnregisteredModelIsRefusedOnceItsAnswerIsStale) {
  FakeCoordinator c;
  EXPECT_TRUE(c.cache.Check("m", kX, Contiguous(8, 8)).ok());
  c.registered = false;
  c.now += absl::Seconds(3);
  absl::Status s = c.cache.Check("m", kX, Contiguous(8, 8)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "ReadRange: \"/models/m/x.safetensors\" is not a file of a registered model: no model "
            "\"m\" is registered");
}

TEST(ServedRangesCache, ARefusalAsksAgainAtMostOnceASecond) {
  FakeCoordinator c;
  c.registered = false;
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(c.cache.Check("m", kX, Contiguous(8, 8)).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(c.fetches, 1);
  c.registered = true;  // registered a moment ago: seen once a second has passed
  c.now += absl::Milliseconds(1100);
  EXPECT_TRUE(c.cache.Check("m", kX, Contiguous(8, 8)).ok());
  EXPECT_EQ(c.fetches, 2);
  // Bytes outside the tensors ask again too, but not more than once a second.
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(c.cache.Check("m", kX, Contiguous(0, 8)).ok());
  EXPECT_EQ(c.fetches, 2);
}

TEST(ServedRangesCache, KeepsTheLastAnswerWhileTheCoordinatorIsDownButNotAfterForget) {
  FakeCoordinator c;
  EXPECT_TRUE(c.cache.Check("m", kX, Contiguous(8, 8)).ok());
  c.reachable = false;
  c.now += absl::Seconds(3);
  EXPECT_TRUE(c.cache.Check("m", kX, Contiguous(8, 8)).ok());
  c.cache.Forget("m");
  absl::Status s = c.cache.Check("m", kX, Contiguous(8, 8)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

// An answer fetched anew that says the same keeps the one held, and so what was checked of its
// files (ServedRanges::CheckOpened): a file is not parsed again every fresh_for.
TEST(ServedRangesCache, AnUnchangedAnswerKeepsTheRangesHeldAndAChangedOneReplacesThem) {
  FakeCoordinator c;
  c.sent = true;
  absl::StatusOr<std::shared_ptr<const ServedRanges>> first = c.cache.Check("m", kX, Contiguous(8, 8));
  ASSERT_TRUE(first.ok()) << first.status();
  c.now += absl::Seconds(3);
  absl::StatusOr<std::shared_ptr<const ServedRanges>> again = c.cache.Check("m", kX, Contiguous(8, 8));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(c.fetches, 2);
  EXPECT_EQ(first->get(), again->get()) << "the same answer replaced the ranges held";
  c.end = 72;
  c.now += absl::Seconds(3);
  absl::StatusOr<std::shared_ptr<const ServedRanges>> changed = c.cache.Check("m", kX, Contiguous(8, 8));
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_NE(first->get(), changed->get()) << "another answer kept the old ranges";
  // Records this daemon built are never the same claims: nothing of theirs is checked to keep.
  EXPECT_FALSE(Model().SameClaims(Model()));
}

// `metactl register --refresh` on the agent after a file was replaced: the same tensors, the
// files stamped anew. Keeping the ranges held would keep refusing the new file (or, had the
// old stamps been dropped, keep a verdict taken on another file).
TEST(ServedRanges, RangesWhoseFilesWereStampedAnewAreNotTheSameClaims) {
  Checkpoint checkpoint;
  checkpoint.dir = "/models/m";
  checkpoint.files = {"x.safetensors"};
  checkpoint.tensors = {At("x.safetensors", 8, 24)};
  auto claims = std::make_shared<const Checkpoint>(checkpoint);
  const FileStamp stamped{100, 7, /*device=*/2049, /*inode=*/12, 7};
  FileStamp renamed_over = stamped;
  renamed_over.inode = 13;
  const ServedRanges held("m", claims, "coordinator c (GetLayout)", {{"x.safetensors", stamped}});
  EXPECT_TRUE(
      held.SameClaims(ServedRanges("m", claims, "coordinator c (GetLayout)", {{"x.safetensors", stamped}})));
  EXPECT_FALSE(held.SameClaims(
      ServedRanges("m", claims, "coordinator c (GetLayout)", {{"x.safetensors", renamed_over}})));
  EXPECT_FALSE(held.SameClaims(ServedRanges("m", claims, "coordinator c (GetLayout)")));
}

}  // namespace
}  // namespace metaload
