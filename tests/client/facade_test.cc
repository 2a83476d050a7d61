// The public facade (include/metaload/) as a launcher meets it, with nothing but its own types:
// a checkpoint opened and read whole and by box, refusals before any read, options refused at
// the edge, the error kinds a status maps to, and verification across two ranks of tensors the
// caller filled itself. tests/install/consumer/ builds against the installed copy of the same
// headers.
#include <gtest/gtest.h>
#include <torch/types.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "metaload/errors.h"
#include "metaload/load.h"
#include "metaload/materialize.h"
#include "metaload/progress.h"
#include "metaload/verify.h"
#include "planner/format/safetensors_writer.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

// A checkpoint of two tensors: "w" [3, 4] F32 holding 0..11 and "b" [4] BF16.
class FacadeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto count_up = [](absl::Span<uint8_t> out) {
      for (size_t i = 0; i < out.size() / 4; ++i) {
        const float value = static_cast<float>(i);
        std::memcpy(out.data() + 4 * i, &value, 4);
      }
    };
    auto zeros = [](absl::Span<uint8_t> out) { std::memset(out.data(), 0, out.size()); };
    ASSERT_TRUE(WriteSafetensors(dir_.File("model.safetensors"),
                                 {{"w", DType::kF32, {3, 4}, count_up}, {"b", DType::kBF16, {4}, zeros}})
                    .ok());
  }
  Model Open() {
    absl::StatusOr<Model> model = Model::Open({.name = "m", .checkpoint = dir_.path()});
    EXPECT_TRUE(model.ok()) << model.status();
    return *std::move(model);
  }
  testing::TempDir dir_;
};

TEST_F(FacadeTest, AModelSaysWhatItStoresByNameWithTorchDtypes) {
  const Model model = Open();
  ASSERT_EQ(model.stored().size(), 2u);
  EXPECT_EQ(model.stored()[0].name, "b");  // by name
  EXPECT_EQ(model.stored()[0].dtype, at::kBFloat16);
  const StoredTensor* w = model.Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(w->dtype, at::kFloat);
  EXPECT_EQ(w->file, "model.safetensors");
  EXPECT_EQ(model.Find("nope"), nullptr);
  EXPECT_EQ(model.origin(), "checkpoint " + dir_.path());
  EXPECT_EQ(model.answered_by(), "");
}

TEST_F(FacadeTest, MaterializeFillsWholeTensorsAndBoxesAndSaysWhereFrom) {
  const Model model = Open();
  std::vector<TensorRequest> requests{{.name = "w", .full_shape = {3, 4}, .dest = torch::empty({3, 4})},
                                      {.name = "w",
                                       .full_shape = {3, 4},
                                       .box = Box{{1, 2}, {2, 2}},
                                       .dest = torch::empty({2, 2}, torch::kDouble)}};
  absl::StatusOr<MaterializeReport> report = Materialize(model, requests);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(report->refused.empty());
  ASSERT_EQ(report->results.size(), 2u);
  for (const TensorResult& r : report->results) EXPECT_TRUE(r.filled) << r.error;
  EXPECT_EQ(report->results[0].provenance_kind, ProvenanceKind::kDirect);
  EXPECT_EQ(report->results[0].provenance, "direct");
  EXPECT_EQ(report->results[1].provenance, "direct>F64");  // converted to the held dtype on load
  EXPECT_TRUE(torch::equal(requests[0].dest, torch::arange(12, torch::kFloat).reshape({3, 4})));
  EXPECT_TRUE(torch::equal(requests[1].dest, torch::tensor({{6.0, 7.0}, {10.0, 11.0}}, torch::kDouble)));
  EXPECT_GT(report->direct_bytes, 0u);
  EXPECT_EQ(report->streamed_bytes, 0u);
}

TEST_F(FacadeTest, AMissingTensorRefusesTheCallBeforeAnyReadUnlessInitialized) {
  const Model model = Open();
  const at::Tensor untouched = torch::full({3, 4}, 5.0);
  std::vector<TensorRequest> requests{{.name = "w", .full_shape = {3, 4}, .dest = untouched},
                                      {.name = "gone", .full_shape = {2}, .dest = torch::empty({2})}};
  absl::StatusOr<MaterializeReport> refused = Materialize(model, requests);
  ASSERT_TRUE(refused.ok()) << refused.status();
  ASSERT_EQ(refused->refused.size(), 1u);
  EXPECT_EQ(refused->refused[0].tensor, "gone");
  EXPECT_FALSE(refused->summary.empty());
  EXPECT_TRUE(torch::equal(untouched, torch::full({3, 4}, 5.0))) << "nothing read";

  absl::StatusOr<MaterializeReport> zeroed = Materialize(model, requests, {.init_missing = "zeros"});
  ASSERT_TRUE(zeroed.ok()) << zeroed.status();
  ASSERT_TRUE(zeroed->refused.empty());
  EXPECT_EQ(zeroed->results[1].provenance_kind, ProvenanceKind::kInit);
  EXPECT_EQ(zeroed->results[1].provenance, "init:zeros");
}

TEST_F(FacadeTest, BadOptionsAreRefusedAtTheEdgeAsBadInput) {
  const Model model = Open();
  std::vector<TensorRequest> requests{{.name = "w", .full_shape = {3, 4}, .dest = torch::empty({3, 4})}};
  for (const MaterializeOptions& options :
       {MaterializeOptions{.read = {.read_threads = 0}},
        MaterializeOptions{.read = {.timeout = absl::ZeroDuration()}},
        MaterializeOptions{.read = {.progress_interval = absl::Milliseconds(9)}},
        MaterializeOptions{.init_missing = "sometimes"}}) {
    absl::StatusOr<MaterializeReport> report = Materialize(model, requests, options);
    ASSERT_FALSE(report.ok());
    EXPECT_EQ(KindOf(report.status()), ErrorKind::kBadInput) << report.status();
    EXPECT_EQ(ExitCodeOf(KindOf(report.status())), 2);
  }
  absl::StatusOr<LoadedRank> load =
      LoadRank({.model = "m", .daemon = "127.0.0.1:1", .read = {.read_threads = 65}});
  ASSERT_FALSE(load.ok());
  EXPECT_EQ(load.status().message(), "read_threads 65 is outside 1..64");
}

TEST_F(FacadeTest, ProgressCountsEveryByteTheReportCountsAndEndsOnTheCallersThread) {
  const Model model = Open();
  std::vector<TensorRequest> requests{
      {.name = "w", .full_shape = {3, 4}, .dest = torch::empty({3, 4})},
      {.name = "w", .full_shape = {3, 4}, .box = Box{{1, 0}, {2, 4}}, .dest = torch::empty({2, 4})},
      {.name = "b",
       .full_shape = {4},
       .dest = torch::empty({4}, torch::kFloat)},                       // converted: stored bytes count
      {.name = "gone", .full_shape = {2}, .dest = torch::empty({2})}};  // initialized: not counted
  std::mutex mu;
  std::vector<LoadProgress> records;
  std::vector<std::thread::id> threads;
  MaterializeOptions options{.init_missing = "zeros"};
  options.read.progress_interval = absl::Milliseconds(10);
  options.read.progress = [&](const LoadProgress& p) {
    std::lock_guard<std::mutex> lock(mu);
    records.push_back(p);
    threads.push_back(std::this_thread::get_id());
  };
  absl::StatusOr<MaterializeReport> report = Materialize(model, requests, options);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_FALSE(records.empty());
  const LoadProgress& last = records.back();
  EXPECT_TRUE(last.finished);
  EXPECT_EQ(threads.back(), std::this_thread::get_id());
  EXPECT_EQ(last.direct_bytes, report->direct_bytes);
  EXPECT_EQ(last.direct_bytes, 12u * 4 + 8u * 4 + 4u * 2);  // w, 2 rows of w, b as BF16
  EXPECT_EQ(last.streamed_bytes + last.received_bytes, 0u);
  EXPECT_EQ(last.total_bytes, last.direct_bytes);
  EXPECT_EQ(last.tensors_done, 3u);
  EXPECT_EQ(last.tensors_total, 3u);
  for (size_t i = 0; i + 1 < records.size(); ++i) {
    EXPECT_FALSE(records[i].finished) << i;
    EXPECT_NE(threads[i], std::this_thread::get_id()) << "only the last record on the caller's thread";
    EXPECT_LE(records[i].done_bytes(), records[i + 1].done_bytes());
    EXPECT_LE(records[i].tensors_done, records[i + 1].tensors_done);
  }
}

TEST_F(FacadeTest, ACallbackThatThrowsIsDroppedAndTheLoadGoesOn) {
  const Model model = Open();
  std::vector<TensorRequest> requests{{.name = "w", .full_shape = {3, 4}, .dest = torch::empty({3, 4})}};
  std::atomic<int> calls{0};
  MaterializeOptions options;
  options.read.progress_interval = absl::Milliseconds(10);
  options.read.progress = [&](const LoadProgress&) {
    ++calls;
    throw std::runtime_error("a launcher's bug");
  };
  absl::StatusOr<MaterializeReport> report = Materialize(model, requests, options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->results[0].filled) << report->results[0].error;
  EXPECT_TRUE(torch::equal(requests[0].dest, torch::arange(12, torch::kFloat).reshape({3, 4})));
  EXPECT_EQ(calls.load(), 1) << "called no more once it threw";
}

TEST_F(FacadeTest, StatusesMapToTheKindsMetactlExitsWith) {
  absl::StatusOr<Model> missing = Model::Open({.name = "m", .checkpoint = dir_.File("nowhere")});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(KindOf(missing.status()), ErrorKind::kBadInput) << missing.status();
  absl::StatusOr<LoadedRank> unreachable =
      LoadRank({.model = "m", .daemon = "127.0.0.1:1", .read = {.timeout = absl::Seconds(2)}});
  ASSERT_FALSE(unreachable.ok());
  EXPECT_EQ(KindOf(unreachable.status()), ErrorKind::kFailure) << unreachable.status();
  EXPECT_EQ(ExitCodeOf(ErrorKind::kFailure), 1);
  EXPECT_EQ(ExitCodeOf(ErrorKind::kMetaTensor), 3);
  EXPECT_FALSE(IsMetaTensorError(absl::FailedPreconditionError("not the coordinator")));
}

TEST(FacadeVerify, TwoRanksOfHeldTensorsEachNameTheOthersMetaTensor) {
  const int port = testing::FreeLoopbackPort();
  std::vector<absl::StatusOr<Verdict>> verdicts(2, absl::UnknownError("not run"));
  std::thread ranks[2];
  for (int rank = 0; rank < 2; ++rank) {
    ranks[rank] = std::thread([&, rank] {
      std::vector<HeldTensor> held{{.name = "w", .tensor = torch::zeros({2})}};
      if (rank == 1) held.push_back({.name = "lm_head.weight", .tensor = torch::empty({2}, torch::kMeta)});
      verdicts[rank] = VerifyAcrossRanks(rank, 2, held, {.master_port = port, .timeout = absl::Seconds(20)});
    });
  }
  for (std::thread& t : ranks) t.join();
  for (const absl::StatusOr<Verdict>& verdict : verdicts) {
    ASSERT_TRUE(verdict.ok()) << verdict.status();
    EXPECT_FALSE(verdict->ok);
    EXPECT_EQ(verdict->backend, "gloo");
    EXPECT_EQ(verdict->bad_tensor_count, 1);
    EXPECT_EQ(verdict->bad_ranks, (std::vector<int>{1}));
    ASSERT_EQ(verdict->findings.size(), 1u);
    EXPECT_EQ(verdict->findings[0], "rank 1: lm_head.weight: still on meta");
    EXPECT_FALSE(verdict->summary.empty());
  }
}

TEST(FacadeVerify, ARankOutsideTheWorldIsAnError) {
  absl::StatusOr<Verdict> verdict = VerifyAcrossRanks(2, 2, {});
  ASSERT_FALSE(verdict.ok());
  EXPECT_EQ(KindOf(verdict.status()), ErrorKind::kBadInput) << verdict.status();
}

}  // namespace
}  // namespace metaload
