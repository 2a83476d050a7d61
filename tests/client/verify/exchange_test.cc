// The exchange of rank reports every entry point runs (client/verify/exchange.h), with its
// ranks as threads and the sum in memory: what each rank learns, the same on every rank.
#include "client/verify/exchange.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace metaload {
namespace {

// A byte-wise sum of `world` threads' buffers: each call blocks until every rank has called.
class SumHub {
 public:
  explicit SumHub(int world) : world_(world) {}
  absl::Status Sum(absl::Span<uint8_t> data) {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t round = round_;
    if (sum_.size() < data.size()) sum_.resize(data.size(), 0);
    for (size_t i = 0; i < data.size(); ++i) sum_[i] = static_cast<uint8_t>(sum_[i] + data[i]);
    if (++arrived_ == world_) {
      result_ = sum_;
      sum_.clear();
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return round_ != round; });
    }
    std::copy(result_.begin(), result_.begin() + data.size(), data.begin());
    ++calls_;
    return absl::OkStatus();
  }
  int calls() const { return calls_; }

 private:
  const int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint8_t> sum_, result_;
  int arrived_ = 0;
  int64_t round_ = 0;
  int calls_ = 0;
};

std::vector<VerifyOutcome> Exchange(const std::vector<RankReport>& reports, SumHub* hub) {
  const int world = static_cast<int>(reports.size());
  std::vector<VerifyOutcome> outcomes(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      absl::StatusOr<VerifyOutcome> o = ExchangeReports(
          reports[r], r, world, [&](absl::Span<uint8_t> data, const std::string&) { return hub->Sum(data); });
      ASSERT_TRUE(o.ok()) << o.status();
      outcomes[r] = *o;
    });
  }
  for (std::thread& t : ranks) t.join();
  return outcomes;
}

TEST(Exchange, EveryRankLearnsEveryRanksFindingsInRankOrder) {
  std::vector<RankReport> reports(3);
  for (RankReport& r : reports) {
    r.checked_count = 10;
    r.plan_digest = "abc";
  }
  reports[1].bad_tensor_count = 1;
  reports[1].findings = {{"lm_head.weight", "still on meta"}};
  reports[2].could_not_load = true;
  reports[2].findings = {{"", "could not load: no plan"}};
  reports[0].unproven_count = 2;
  SumHub hub(3);
  const std::vector<VerifyOutcome> outcomes = Exchange(reports, &hub);
  for (const VerifyOutcome& o : outcomes) {
    EXPECT_FALSE(o.ok());
    EXPECT_EQ(o.bad_tensor_count, 1);
    EXPECT_EQ(o.bad_ranks, (std::vector<int>{1}));
    EXPECT_EQ(o.failed_ranks, (std::vector<int>{2}));
    EXPECT_EQ(o.checked_count, 30);
    EXPECT_EQ(o.unproven_count, 2);
    EXPECT_EQ(o.Lines(), (std::vector<std::string>{"rank 1: lm_head.weight: still on meta",
                                                   "rank 2: could not load: no plan"}));
    EXPECT_EQ(
        o.Message(3),
        "verification failed: 1 tensor on meta or unfilled on rank 1; rank 2 could not load (3 ranks):\n"
        "  rank 1: lm_head.weight: still on meta\n  rank 2: could not load: no plan");
  }
  EXPECT_EQ(hub.calls(), 3 * 3) << "headers, details, and the last sum every rank waits for";
}

TEST(Exchange, NothingWrongCostsOneSumOfHeadersOnly) {
  std::vector<RankReport> reports(4);
  for (RankReport& r : reports) r.checked_count = 5;
  SumHub hub(4);
  for (const VerifyOutcome& o : Exchange(reports, &hub)) {
    EXPECT_TRUE(o.ok());
    EXPECT_EQ(o.checked_count, 20);
    EXPECT_TRUE(o.Lines().empty());
  }
  EXPECT_EQ(hub.calls(), 4);
}

TEST(Exchange, RanksThatLoadedDifferentPlansAreNamed) {
  std::vector<RankReport> reports(3);
  reports[0].plan_digest = reports[1].plan_digest = "aaaaaaaaaaaaaaaa";
  reports[2].plan_digest = "bbbbbbbbbbbbbbbb";
  reports[0].plan_label = reports[1].plan_label = "tp 2";
  reports[2].plan_label = "tp 3";
  SumHub hub(3);
  for (const VerifyOutcome& o : Exchange(reports, &hub)) {
    EXPECT_FALSE(o.ok());
    EXPECT_EQ(o.plan_mismatch, (std::vector<std::string>{"ranks 0, 1 loaded plan aaaaaaaaaaaa (tp 2)",
                                                         "rank 2 loaded plan bbbbbbbbbbbb (tp 3)"}));
  }
}

TEST(Exchange, ASummaryStandsForItsRanksFindingsAndARefusalSaysSo) {
  std::vector<RankReport> reports(2);
  reports[0].bad_tensor_count = 2;
  reports[0].findings = {{"a", "missing"}, {"b", "missing"}};
  reports[0].summary = {"a, b: it is not in the checkpoint"};
  SumHub hub(2);
  for (const VerifyOutcome& o : Exchange(reports, &hub)) {
    EXPECT_EQ(o.findings.size(), 2u);
    EXPECT_EQ(o.Message(2, ExchangeKind::kRefusal),
              "materialize refused, before anything was allocated or read: 2 tensors without a source or a "
              "place on rank 0 (2 ranks):\n  rank 0: a, b: it is not in the checkpoint");
  }
}

TEST(Exchange, OneProcessAloneNeedsNoSum) {
  RankReport mine;
  mine.bad_tensor_count = 1;
  mine.findings = {{"w", "still on meta"}};
  absl::StatusOr<VerifyOutcome> o = ExchangeReports(mine, 0, 1, nullptr);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->Lines(), (std::vector<std::string>{"rank 0: w: still on meta"}));
}

TEST(Exchange, ARankOutsideTheWorldIsRefused) {
  EXPECT_EQ(ExchangeReports({}, 2, 2, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ExchangeReports({}, 0, 0, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ExchangeReports({}, 0, (1 << 20) + 1, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Exchange, AHeaderClaimingDetailsOverTheLimitIsNotReadAndSaysWho) {
  // Rank 1's header claims 2^40 bytes of details; every rank must agree to read none of them
  // (no allocation of that size) and say so.
  SumHub hub(2);
  std::vector<VerifyOutcome> outcomes(2);
  std::thread hostile([&] {
    std::vector<uint8_t> headers(2 * kHeaderBytes, 0);
    RankReport lie;
    lie.bad_tensor_count = 1;
    EncodeHeader(lie, uint64_t{1} << 40, absl::MakeSpan(headers).subspan(kHeaderBytes, kHeaderBytes));
    ASSERT_TRUE(hub.Sum(absl::MakeSpan(headers)).ok());
  });
  RankReport honest;
  absl::StatusOr<VerifyOutcome> o = ExchangeReports(
      honest, 0, 2, [&](absl::Span<uint8_t> data, const std::string&) { return hub.Sum(data); });
  hostile.join();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->ok());
  ASSERT_EQ(o->notes.size(), 1u);
  EXPECT_NE(o->notes[0].find("rank 1 sent a report with 1099511627776 bytes of details"), std::string::npos)
      << o->notes[0];
  EXPECT_EQ(o->bad_ranks, (std::vector<int>{1}));
}

}  // namespace
}  // namespace metaload
