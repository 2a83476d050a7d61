// The exchange of rank reports every entry point runs (client/verify/exchange.h), with its
// ranks as threads and the sum in memory: what each rank learns, the same on every rank.
#include "client/verify/exchange.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "util/hash/tile_digest.h"

namespace metaload {
namespace {

// An element-wise sum (bytes wrap mod 256, as Gloo's and NCCL's) of `world` threads' buffers:
// each call blocks until every rank has called.
template <typename T>
class Hub {
 public:
  explicit Hub(int world) : world_(world) {}
  absl::Status Sum(absl::Span<T> data) {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t round = round_;
    if (sum_.size() < data.size()) sum_.resize(data.size(), 0);
    for (size_t i = 0; i < data.size(); ++i) sum_[i] = static_cast<T>(sum_[i] + data[i]);
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
  std::vector<T> sum_, result_;
  int arrived_ = 0;
  int64_t round_ = 0;
  int calls_ = 0;
};

// Both sums of a world of threads: a ranks' rounds alternate between them, each with its hub.
struct SumHub {
  explicit SumHub(int world) : bytes(world), int64(world) {}
  absl::Status Sum(absl::Span<uint8_t> data) { return bytes.Sum(data); }
  int calls() const { return bytes.calls() + int64.calls(); }
  ExchangeSums Sums() {
    return {[this](absl::Span<uint8_t> data, const std::string&) { return bytes.Sum(data); },
            [this](absl::Span<int64_t> data, const std::string&) { return int64.Sum(data); }};
  }
  Hub<uint8_t> bytes;
  Hub<int64_t> int64;
};

std::vector<VerifyOutcome> Exchange(const std::vector<RankReport>& reports, SumHub* hub) {
  const int world = static_cast<int>(reports.size());
  std::vector<VerifyOutcome> outcomes(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      absl::StatusOr<VerifyOutcome> o = ExchangeReports(reports[r], r, world, hub->Sums());
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

// Was: "2 tensors on meta or unfilled on ranks 0, 1:" then the same line once per rank (issue 37).
TEST(Exchange, OneTensorSeveralRanksMissIsOneTensorSaidOnceNamingTheRanks) {
  std::vector<RankReport> reports(3);
  for (RankReport& r : reports) r.plan_digest = "abc";
  reports[0].bad_tensor_count = reports[2].bad_tensor_count = 1;
  reports[0].findings = reports[2].findings = {{"lm_head.weight", "still on meta"}};
  reports[1].bad_tensor_count = 2;
  reports[1].findings = {{"lm_head.weight", "still on meta"}, {"model.norm.weight", "still on meta"}};
  SumHub hub(3);
  for (const VerifyOutcome& o : Exchange(reports, &hub)) {
    EXPECT_EQ(o.Message(3),
              "verification failed: 2 tensors on meta or unfilled on ranks 0-2 (3 ranks):\n"
              "  ranks 0-2: lm_head.weight: still on meta\n  rank 1: model.norm.weight: still on meta");
  }
  // A refusal's summary lines too: one tensor without a source on both ranks.
  std::vector<RankReport> refused(2);
  for (RankReport& r : refused) {
    r.bad_tensor_count = 1;
    r.findings = {{"score.weight", "missing"}};
    r.summary = {"score.weight: it is not in the checkpoint"};
  }
  SumHub refusal_hub(2);
  for (const VerifyOutcome& o : Exchange(refused, &refusal_hub)) {
    EXPECT_EQ(
        o.Message(2, ExchangeKind::kRefusal),
        "materialize refused, before anything was allocated or read: 1 tensor without a source or a place "
        "on ranks 0, 1 (2 ranks):\n  ranks 0, 1: score.weight: it is not in the checkpoint");
  }
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
  absl::StatusOr<VerifyOutcome> o = ExchangeReports(mine, 0, 1, {});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->Lines(), (std::vector<std::string>{"rank 0: w: still on meta"}));
}

TEST(Exchange, ARankOutsideTheWorldIsRefused) {
  EXPECT_EQ(ExchangeReports({}, 2, 2, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ExchangeReports({}, 0, 0, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ExchangeReports({}, 0, (1 << 20) + 1, {}).status().code(), absl::StatusCode::kInvalidArgument);
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
  absl::StatusOr<VerifyOutcome> o = ExchangeReports(honest, 0, 2, hub.Sums());
  hostile.join();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->ok());
  ASSERT_EQ(o->notes.size(), 1u);
  EXPECT_NE(o->notes[0].find("rank 1 sent a report with 1099511627776 bytes of details"), std::string::npos)
      << o->notes[0];
  EXPECT_EQ(o->bad_ranks, (std::vector<int>{1}));
}

// A [rows, 512] BF16 tensor "w" (index 3 of a model of 5 stored tensors) with its registered
// digest of `kind`, and what ranks holding rows [r0, r1) of `bytes` prove of it.
struct ProvedTensor {
  DigestKind kind;
  int64_t rows = 37;
  std::vector<uint8_t> bytes;
  TensorLayout layout;

  explicit ProvedTensor(DigestKind k) : kind(k) {
    bytes.resize(static_cast<size_t>(rows) * 512 * 2);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 2654435761u >> 11);
    layout.name = "w";
    layout.dtype = DType::kBF16;
    layout.shape = {rows, 512};
    layout.file = "model.safetensors";
    layout.begin_offset = 1000;
    layout.end_offset = 1000 + bytes.size();
    layout.index = 3;
    const TileGrid grid = TileGridFor(kind, layout.shape, 2);
    layout.digest = TensorDigest{kind, grid.tile_bytes, LanesToBytes(DigestOf(kind, grid, bytes))};
  }
  TensorProof Rows(int64_t r0, int64_t r1, const std::vector<uint8_t>* other = nullptr) const {
    const std::vector<uint8_t>& from = other != nullptr ? *other : bytes;
    const uint64_t row = 512 * 2;
    TensorProof proof = ProofTemplate(layout);
    TileProof tiles(kind, TileGridFor(kind, layout.shape, 2),
                    {{r0 * row, (r1 - r0) * row, (r1 - r0) * row, 1}});
    tiles.Add(r0 * row, absl::MakeConstSpan(from).subspan(r0 * row, (r1 - r0) * row));
    proof.sum = tiles.Finish();
    return proof;
  }
  TensorProof Columns(uint64_t c0, uint64_t c1) const {
    const uint64_t row = 512 * 2;
    TensorProof proof = ProofTemplate(layout);
    const StridedRuns runs{c0 * 2, (c1 - c0) * 2, row, static_cast<uint64_t>(rows)};
    TileProof tiles(kind, TileGridFor(kind, layout.shape, 2), {runs});
    for (int64_t r = 0; r < rows; ++r) {
      tiles.Add(r * row + c0 * 2, absl::MakeConstSpan(bytes).subspan(r * row + c0 * 2, (c1 - c0) * 2));
    }
    proof.sum = tiles.Finish();
    return proof;
  }
};

class ProofTable : public ::testing::TestWithParam<DigestKind> {};

TEST_P(ProofTable, AnFsdpSplitAndTwoReplicasOfItAreCheckedOnEveryRank) {
  ProvedTensor w(GetParam());
  std::vector<RankReport> reports(4);
  // Rows 0-19 and 20-36 (an uneven FSDP split), held by ranks 0-1 and again by ranks 2-3.
  reports[0].proofs = {w.Rows(0, 20)};
  reports[1].proofs = {w.Rows(20, 37)};
  reports[2].proofs = {w.Rows(0, 20)};
  reports[3].proofs = {w.Rows(20, 37)};
  SumHub hub(4);
  for (const VerifyOutcome& o : Exchange(reports, &hub)) {
    EXPECT_TRUE(o.ok()) << o.Message(4);
    EXPECT_TRUE(o.proven());
    EXPECT_EQ(o.stored_checked, 1) << "one stored tensor, counted once whatever ranks held it";
    EXPECT_EQ(o.ContentLine(),
              absl::StrCat("content proven: 1 stored tensor checked against their registered ",
                           DigestKindName(GetParam()), " digests"));
  }
}

TEST_P(ProofTable, ColumnSlicesOfTensorParallelismAreCheckedToo) {
  ProvedTensor w(GetParam());
  std::vector<RankReport> reports(4);
  for (int r = 0; r < 4; ++r) reports[r].proofs = {w.Columns(128 * r, 128 * (r + 1))};
  SumHub hub(4);
  for (const VerifyOutcome& o : Exchange(reports, &hub)) {
    EXPECT_TRUE(o.proven()) << o.ContentLine();
    EXPECT_EQ(o.stored_checked, 1);
  }
}

TEST_P(ProofTable, OneRankWhoseBytesDifferFailsEveryRankNamingTheTensor) {
  ProvedTensor w(GetParam());
  std::vector<uint8_t> zeros(w.bytes.size(), 0);  // what a hostile server sent rank 2
  std::vector<RankReport> reports(4);
  reports[0].proofs = {w.Rows(0, 20)};
  reports[1].proofs = {w.Rows(20, 37)};
  reports[2].proofs = {w.Rows(0, 20, &zeros)};
  reports[3].proofs = {w.Rows(20, 37)};
  SumHub hub(4);
  for (const VerifyOutcome& o : Exchange(reports, &hub)) {
    EXPECT_FALSE(o.ok());
    EXPECT_EQ(o.stored_mismatch, 1);
    EXPECT_EQ(o.bad_tensor_count, 4) << "every holder names it";
    ASSERT_FALSE(o.findings.empty());
    EXPECT_EQ(o.findings[0].finding.tensor, "w");
    EXPECT_NE(o.findings[0].finding.why.find("bytes differ from the digest registered for it"),
              std::string::npos)
        << o.findings[0].finding.why;
  }
}

TEST_P(ProofTable, ASplitThatCutsTilesIsUnprovenAndNamedNotPassed) {
  ProvedTensor w(GetParam());
  std::vector<RankReport> reports(3);  // 512 columns in 3: 171, 171, 170
  reports[0].proofs = {w.Columns(0, 171)};
  reports[1].proofs = {w.Columns(171, 342)};
  reports[2].proofs = {w.Columns(342, 512)};
  SumHub hub(3);
  for (const VerifyOutcome& o : Exchange(reports, &hub)) {
    EXPECT_TRUE(o.ok()) << "nothing differs: it is not a failure";
    EXPECT_FALSE(o.proven());
    EXPECT_EQ(o.stored_unproven, 1);
    ASSERT_EQ(o.unproven.size(), 1u) << "named once, not by every holder";
    EXPECT_NE(o.UnprovenLines()[0].find("w: unproven: the ranks' split of it cuts"), std::string::npos)
        << o.UnprovenLines()[0];
  }
}

TEST_P(ProofTable, PartOfATensorNoRankLoadedIsUnproven) {
  ProvedTensor w(GetParam());
  std::vector<RankReport> reports(2);
  reports[0].proofs = {w.Rows(0, 20)};  // rows 20-36: nobody
  SumHub hub(2);
  for (const VerifyOutcome& o : Exchange(reports, &hub)) {
    EXPECT_FALSE(o.proven());
    EXPECT_EQ(o.stored_unproven, 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, ProofTable, ::testing::Values(DigestKind::kFast, DigestKind::kStrong),
                         [](const auto& info) { return std::string(DigestKindName(info.param)); });

TEST(ProofTable, TensorsReadWithoutADigestAreCountedOnceAndNotVerified) {
  ProvedTensor w(DigestKind::kFast);
  w.layout.digest.reset();
  std::vector<RankReport> reports(2);
  reports[0].proofs = {ProofTemplate(w.layout)};
  reports[1].proofs = {ProofTemplate(w.layout)};
  reports[1].computed_count = 2;
  SumHub hub(2);
  for (const VerifyOutcome& o : Exchange(reports, &hub)) {
    EXPECT_TRUE(o.ok());
    EXPECT_FALSE(o.proven());
    EXPECT_EQ(o.stored_no_digest, 1);
    EXPECT_EQ(
        o.ContentLine(),
        "content not proven for every tensor: 1 read without a digest (register the model with digests to "
        "check them); counted on each rank holding one: 2 buffers computed");
  }
}

TEST(ProofTable, AHeaderAskingForAHugeTableIsNotAllocatedAndNothingIsChecked) {
  ProvedTensor w(DigestKind::kFast);
  SumHub hub(2);
  std::thread hostile([&] {
    std::vector<uint8_t> headers(2 * kHeaderBytes, 0);
    RankReport lie;
    lie.table_slots = int64_t{1} << 40;
    lie.table_kind = 1;
    EncodeHeader(lie, 0, absl::MakeSpan(headers).subspan(kHeaderBytes, kHeaderBytes));
    ASSERT_TRUE(hub.Sum(absl::MakeSpan(headers)).ok());
    // It takes part in the rounds that follow with nothing of its own: the headers again, the
    // details (the honest rank names what it could not check), the last sum.
    ASSERT_TRUE(hub.int64.Sum({}).ok());
    ASSERT_TRUE(hub.Sum({}).ok());
    ASSERT_TRUE(hub.Sum({}).ok());
  });
  RankReport honest;
  honest.proofs = {w.Rows(0, 37)};
  absl::StatusOr<VerifyOutcome> o = ExchangeReports(honest, 0, 2, hub.Sums());
  hostile.join();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->proven());
  EXPECT_EQ(o->stored_checked, 0);
  ASSERT_FALSE(o->notes.empty());
  EXPECT_EQ(o->notes[0],
            "no stored tensor's content was checked: a rank sent a table of 1099511627776 slots");
}

TEST(ProofTable, OneProcessAloneJudgesItsOwnProofs) {
  ProvedTensor w(DigestKind::kStrong);
  RankReport mine;
  mine.proofs = {w.Rows(0, 37)};
  absl::StatusOr<VerifyOutcome> o = ExchangeReports(mine, 0, 1, {});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->proven());
  EXPECT_EQ(o->stored_checked, 1);
}

}  // namespace
}  // namespace metaload
