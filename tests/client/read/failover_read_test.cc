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

// The fake servers, one source health shared by the pieces a test reads, and where they land.
class ReadWithFailoverTest : public ::testing::Test {
 protected:
  // One piece read: `runs` from `sources` into out_ (sized here).
  absl::Status Read(const std::vector<ReadSource>& sources, const StridedRuns& runs, PieceLog* log) {
    out_.assign(runs.total_bytes(), 0);
    return ReadWithFailover(sources, runs, absl::MakeSpan(out_), fakes_.Attempt(), Quick(), &health_, "/m/f",
                            nullptr, log);
  }

  Fakes fakes_;
  SourceHealth health_;
  std::vector<uint8_t> out_;
  const StridedRuns page_{0, 4096, 4096, 1};  // one contiguous 4 KiB piece
};

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

TEST_F(ReadWithFailoverTest, ABrokenStreamResumesOnTheNextServerFromItsLastByte) {
  fakes_["a:1"].fail_after_bytes = 3000;
  const StridedRuns runs{500, 10000, 10000, 1};
  PieceLog log;
  ASSERT_TRUE(Read(kTwo, runs, &log).ok());
  ExpectFileBytes(out_, runs);
  EXPECT_EQ(fakes_["a:1"].bytes_sent + fakes_["b:1"].bytes_sent, runs.total_bytes()) << "no byte read twice";
  EXPECT_EQ(fakes_["b:1"].requests, (std::vector<StridedRuns>{{3500, 7000, 7000, 1}}));
  ASSERT_EQ(log.failovers.size(), 1u);
  EXPECT_EQ(log.failovers[0].from, "a");
  EXPECT_EQ(log.failovers[0].to, "b");
  EXPECT_EQ(log.failovers[0].at_byte, 3000u);
  EXPECT_EQ(log.failovers[0].error, "broken at 3000");
}

TEST_F(ReadWithFailoverTest, AStridedSliceBrokenMidRunIsCompletedExactly) {
  fakes_["a:1"].fail_after_bytes = 250;  // in the third run of 100
  const StridedRuns runs{64, 100, 400, 8};
  PieceLog log;
  ASSERT_TRUE(Read(kTwo, runs, &log).ok());
  ExpectFileBytes(out_, runs);
  EXPECT_EQ(fakes_["a:1"].bytes_sent + fakes_["b:1"].bytes_sent, runs.total_bytes());
  EXPECT_EQ(fakes_["b:1"].requests,
            (std::vector<StridedRuns>{{64 + 800 + 50, 50, 50, 1}, {64 + 1200, 100, 400, 5}}));
}

TEST_F(ReadWithFailoverTest, TheSameServerIsUsedAgainWhenItComesBack) {
  fakes_["a:1"].fail_after_bytes = 0;
  fakes_["a:1"].failures_left = 3;  // down for three tries, then restarted
  const StridedRuns& runs = page_;
  PieceLog log;
  ASSERT_TRUE(Read({kTwo[0]}, runs, &log).ok());
  ExpectFileBytes(out_, runs);
  EXPECT_EQ(fakes_["a:1"].requests.size(), 4u);
  EXPECT_EQ(log.failovers.size(), 3u);
}

TEST_F(ReadWithFailoverTest, WhenEverySourceFailsEachOneIsNamed) {
  fakes_["a:1"].fail_after_bytes = 0;
  fakes_["b:1"].fail_after_bytes = 0;
  fakes_["b:1"].code = absl::StatusCode::kDeadlineExceeded;
  const StridedRuns& runs = page_;
  PieceLog log;
  absl::Status s = Read(kTwo, runs, &log);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << "the last error's code";
  EXPECT_NE(s.message().find("every source failed (0 of 4096 bytes in place)"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("a: broken at 0"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("b: broken at 0"), absl::string_view::npos) << s;
  EXPECT_EQ(fakes_["a:1"].requests.size() + fakes_["b:1"].requests.size(), 6u) << "3 rounds over 2 sources";
}

TEST_F(ReadWithFailoverTest, TheRequestsOwnFaultIsNotTriedElsewhere) {
  fakes_["a:1"].fail_after_bytes = 0;
  fakes_["a:1"].code = absl::StatusCode::kFailedPrecondition;
  const StridedRuns& runs = page_;
  PieceLog log;
  absl::Status s = Read(kTwo, runs, &log);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fakes_["b:1"].requests.empty());
  EXPECT_TRUE(log.failovers.empty());
}

TEST_F(ReadWithFailoverTest, ASourceThatFailedLatelyIsTriedLastByTheNextPiece) {
  fakes_["a:1"].fail_after_bytes = 0;
  const StridedRuns& runs = page_;
  PieceLog first, second;
  ASSERT_TRUE(Read(kTwo, runs, &first).ok());
  ASSERT_TRUE(Read(kTwo, runs, &second).ok());
  EXPECT_EQ(fakes_["a:1"].requests.size(), 1u) << "the second piece went to b first";
  EXPECT_TRUE(second.failovers.empty());
}

TEST_F(ReadWithFailoverTest, AfterAPieceGaveUpTheNextTriesEachSourceOnce) {
  fakes_["a:1"].fail_after_bytes = 0;
  const StridedRuns& runs = page_;
  PieceLog first, second;
  EXPECT_FALSE(Read({kTwo[0]}, runs, &first).ok());
  EXPECT_EQ(fakes_["a:1"].requests.size(), 6u);
  EXPECT_FALSE(Read({kTwo[0]}, runs, &second).ok());
  EXPECT_EQ(fakes_["a:1"].requests.size(), 7u) << "one more try, not six";
}

}  // namespace
}  // namespace metaload
