// Reading a piece through faults (client/read/failover_read.h), with fake sources that break where a
// test says: resume from the last byte, never read a byte twice, fail over in order, name every
// source when all fail.
#include "client/read/failover_read.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"

namespace metaload {
namespace {

// A "file" whose byte i is i % 251, served by fakes that fail after some bytes.
uint8_t FileByte(uint64_t offset) { return static_cast<uint8_t>(offset % 251); }

struct FakeSource {
  uint64_t fail_after_bytes = UINT64_MAX;  // per attempt
  absl::StatusCode code = absl::StatusCode::kUnavailable;
  int failures_left = 1 << 30;  // then it works
  uint64_t bytes_sent = 0;      // over every attempt
  std::vector<StridedRuns> requests;
};

class Fakes {
 public:
  FakeSource& operator[](const std::string& address) { return sources_[address]; }

  ReadAttempt Attempt() {
    return [this](const ReadSource& source, const StridedRuns& runs, absl::Span<uint8_t> dest,
                  uint64_t* received) -> absl::Status {
      FakeSource& fake = sources_[source.address];
      fake.requests.push_back(runs);
      const bool fails = fake.failures_left > 0 && fake.fail_after_bytes < dest.size();
      const uint64_t n = fails ? fake.fail_after_bytes : dest.size();
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t run = i / runs.run_bytes, within = i % runs.run_bytes;
        dest[i] = FileByte(runs.first_offset + run * runs.stride_bytes + within);
      }
      *received = n;
      fake.bytes_sent += n;
      if (!fails) return absl::OkStatus();
      --fake.failures_left;
      return absl::Status(fake.code, absl::StrCat("broken at ", n));
    };
  }

 private:
  std::map<std::string, FakeSource> sources_;
};

RetryPolicy Quick() {
  RetryPolicy p;
  p.first_backoff = absl::Milliseconds(1);
  p.max_backoff = absl::Milliseconds(4);
  return p;
}

void ExpectFileBytes(const std::vector<uint8_t>& out, const StridedRuns& runs) {
  ASSERT_EQ(out.size(), runs.total_bytes());
  for (uint64_t i = 0; i < out.size(); ++i) {
    const uint64_t run = i / runs.run_bytes, within = i % runs.run_bytes;
    ASSERT_EQ(out[i], FileByte(runs.first_offset + run * runs.stride_bytes + within)) << "byte " << i;
  }
}

const std::vector<ReadSource> kTwo{{"a", "a:1"}, {"b", "b:1"}};

// One piece read: `runs` from `sources` into `out` (sized here).
absl::Status Read(Fakes& fakes, const std::vector<ReadSource>& sources, const StridedRuns& runs,
                  SourceHealth& health, std::vector<uint8_t>& out, PieceLog* log) {
  out.assign(runs.total_bytes(), 0);
  return ReadWithFailover(sources, runs, absl::MakeSpan(out), fakes.Attempt(), Quick(), &health, "/m/f",
                          nullptr, log);
}

TEST(RunsFrom, ResumesMidRunWithItsTailThenTheWholeRunsAfter) {
  const StridedRuns runs{1000, 100, 300, 5};
  EXPECT_EQ(RunsFrom(runs, 0), (std::vector<StridedRuns>{runs}));
  EXPECT_EQ(RunsFrom(runs, 200), (std::vector<StridedRuns>{{1600, 100, 300, 3}}));
  EXPECT_EQ(RunsFrom(runs, 230), (std::vector<StridedRuns>{{1630, 70, 70, 1}, {1900, 100, 300, 2}}));
  EXPECT_EQ(RunsFrom(runs, 499), (std::vector<StridedRuns>{{2299, 1, 1, 1}}));
  EXPECT_TRUE(RunsFrom(runs, 500).empty());
  const StridedRuns contiguous{10, 1000, 1000, 1};
  EXPECT_EQ(RunsFrom(contiguous, 999), (std::vector<StridedRuns>{{1009, 1, 1, 1}}));
}

TEST(ReadWithFailover, ABrokenStreamResumesOnTheNextServerFromItsLastByte) {
  Fakes fakes;
  fakes["a:1"].fail_after_bytes = 3000;
  const StridedRuns runs{500, 10000, 10000, 1};
  std::vector<uint8_t> out;
  SourceHealth health;
  PieceLog log;
  ASSERT_TRUE(Read(fakes, kTwo, runs, health, out, &log).ok());
  ExpectFileBytes(out, runs);
  EXPECT_EQ(fakes["a:1"].bytes_sent + fakes["b:1"].bytes_sent, runs.total_bytes()) << "no byte read twice";
  EXPECT_EQ(fakes["b:1"].requests, (std::vector<StridedRuns>{{3500, 7000, 7000, 1}}));
  ASSERT_EQ(log.failovers.size(), 1u);
  EXPECT_EQ(log.failovers[0].from, "a");
  EXPECT_EQ(log.failovers[0].to, "b");
  EXPECT_EQ(log.failovers[0].at_byte, 3000u);
  EXPECT_EQ(log.failovers[0].error, "broken at 3000");
}

TEST(ReadWithFailover, AStridedSliceBrokenMidRunIsCompletedExactly) {
  Fakes fakes;
  fakes["a:1"].fail_after_bytes = 250;  // in the third run of 100
  const StridedRuns runs{64, 100, 400, 8};
  std::vector<uint8_t> out;
  SourceHealth health;
  PieceLog log;
  ASSERT_TRUE(Read(fakes, kTwo, runs, health, out, &log).ok());
  ExpectFileBytes(out, runs);
  EXPECT_EQ(fakes["a:1"].bytes_sent + fakes["b:1"].bytes_sent, runs.total_bytes());
  EXPECT_EQ(fakes["b:1"].requests,
            (std::vector<StridedRuns>{{64 + 800 + 50, 50, 50, 1}, {64 + 1200, 100, 400, 5}}));
}

TEST(ReadWithFailover, TheSameServerIsUsedAgainWhenItComesBack) {
  Fakes fakes;
  fakes["a:1"].fail_after_bytes = 0;
  fakes["a:1"].failures_left = 3;  // down for three tries, then restarted
  const StridedRuns runs{0, 4096, 4096, 1};
  std::vector<uint8_t> out;
  SourceHealth health;
  PieceLog log;
  ASSERT_TRUE(Read(fakes, {kTwo[0]}, runs, health, out, &log).ok());
  ExpectFileBytes(out, runs);
  EXPECT_EQ(fakes["a:1"].requests.size(), 4u);
  EXPECT_EQ(log.failovers.size(), 3u);
}

TEST(ReadWithFailover, WhenEverySourceFailsEachOneIsNamed) {
  Fakes fakes;
  fakes["a:1"].fail_after_bytes = 0;
  fakes["b:1"].fail_after_bytes = 0;
  fakes["b:1"].code = absl::StatusCode::kDeadlineExceeded;
  const StridedRuns runs{0, 4096, 4096, 1};
  std::vector<uint8_t> out;
  SourceHealth health;
  PieceLog log;
  absl::Status s = Read(fakes, kTwo, runs, health, out, &log);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << "the last error's code";
  EXPECT_NE(s.message().find("every source failed (0 of 4096 bytes in place)"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("a: broken at 0"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("b: broken at 0"), absl::string_view::npos) << s;
  EXPECT_EQ(fakes["a:1"].requests.size() + fakes["b:1"].requests.size(), 6u) << "3 rounds over 2 sources";
}

TEST(ReadWithFailover, TheRequestsOwnFaultIsNotTriedElsewhere) {
  Fakes fakes;
  fakes["a:1"].fail_after_bytes = 0;
  fakes["a:1"].code = absl::StatusCode::kFailedPrecondition;
  const StridedRuns runs{0, 4096, 4096, 1};
  std::vector<uint8_t> out;
  SourceHealth health;
  PieceLog log;
  absl::Status s = Read(fakes, kTwo, runs, health, out, &log);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fakes["b:1"].requests.empty());
  EXPECT_TRUE(log.failovers.empty());
}

TEST(ReadWithFailover, ASourceThatFailedLatelyIsTriedLastByTheNextPiece) {
  Fakes fakes;
  fakes["a:1"].fail_after_bytes = 0;
  const StridedRuns runs{0, 4096, 4096, 1};
  std::vector<uint8_t> out;
  SourceHealth health;
  PieceLog first, second;
  ASSERT_TRUE(Read(fakes, kTwo, runs, health, out, &first).ok());
  ASSERT_TRUE(Read(fakes, kTwo, runs, health, out, &second).ok());
  EXPECT_EQ(fakes["a:1"].requests.size(), 1u) << "the second piece went to b first";
  EXPECT_TRUE(second.failovers.empty());
}

TEST(ReadWithFailover, AfterAPieceGaveUpTheNextTriesEachSourceOnce) {
  Fakes fakes;
  fakes["a:1"].fail_after_bytes = 0;
  const StridedRuns runs{0, 4096, 4096, 1};
  std::vector<uint8_t> out;
  SourceHealth health;
  PieceLog first, second;
  EXPECT_FALSE(Read(fakes, {kTwo[0]}, runs, health, out, &first).ok());
  EXPECT_EQ(fakes["a:1"].requests.size(), 6u);
  EXPECT_FALSE(Read(fakes, {kTwo[0]}, runs, health, out, &second).ok());
  EXPECT_EQ(fakes["a:1"].requests.size(), 7u) << "one more try, not six";
}

}  // namespace
}  // namespace metaload
