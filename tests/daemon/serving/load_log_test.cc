// The loads a daemon takes part in, as its log tells them (daemon/serving/load_log.h): a line
// when a model's load begins here, one when it has been quiet for 2 s, with what this daemon did
// for it; one per stream cut short or failed, at most one per 10 s of each kind.
#include "daemon/serving/load_log.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace metaload {
namespace {

class LoadLogTest : public ::testing::Test {
 protected:
  // The messages logged meanwhile, without "metaload I 12:00:00.000 ".
  template <typename F>
  std::vector<std::string> Lines(F&& f) {
    ::testing::internal::CaptureStderr();
    f();
    const std::string captured = ::testing::internal::GetCapturedStderr();
    std::vector<std::string> lines;
    for (absl::string_view line : absl::StrSplit(captured, '\n', absl::SkipEmpty())) {
      std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(' ', 3));
      lines.emplace_back(parts.size() == 4 ? parts[3] : line);
    }
    return lines;
  }

  PlanAsked Plan(int rank) {
    return PlanAsked{"big", 4, rank, "layers", [] { return uint64_t{400} << 20; }, "10.0.0.7"};
  }

  absl::Time now_ = absl::FromUnixSeconds(1'000'000);
  LoadLog loads_{LoadLog::Options{}, [this] { return now_; }};
};

TEST_F(LoadLogTest, BeginsWithTheFirstPlanAndEndsTwoSecondsAfterTheLastStream) {
  EXPECT_EQ(
      Lines([&] { loads_.PlanAnswered(Plan(2)); }),
      std::vector<std::string>{"load begun: model big, 4 ranks (layers), 400.00 MiB planned; rank 2 asked "
                               "first, from 10.0.0.7"});
  EXPECT_TRUE(Lines([&] {
                now_ += absl::Milliseconds(100);
                loads_.PlanAnswered(Plan(0));
                loads_.PlanAnswered(Plan(2));  // asked again: one rank still
                loads_.StreamOpened("big", "10.0.0.7");
                loads_.StreamOpened("big", "10.0.0.8");
                now_ += absl::Seconds(5);
                loads_.EndQuiet();  // streams in flight: not quiet, however long
                loads_.StreamEnded({"big", "10.0.0.7", "/m/big/a.safetensors", 3 << 20, 3 << 20});
                now_ += absl::Milliseconds(400);
              }).empty());
  std::vector<std::string> cut = Lines([&] {
    loads_.StreamEnded({"big", "10.0.0.8", "/m/big/b.safetensors", 1 << 20, 4 << 20, StreamEnd::kCancelled});
  });
  EXPECT_EQ(
      cut,
      std::vector<std::string>{
          "stream cut short: model big, 1.00 MiB of 4.00 MiB of \"/m/big/b.safetensors\" sent to 10.0.0.8: "
          "the reader went away (it fails over to another server, or stopped)"});
  now_ += absl::Milliseconds(1999);
  EXPECT_TRUE(Lines([&] { loads_.EndQuiet(); }).empty()) << "quiet for less than 2 s";
  now_ += absl::Milliseconds(1);
  EXPECT_EQ(
      Lines([&] { loads_.EndQuiet(); }),
      std::vector<std::string>{"load ended: model big, 2 of 4 ranks asked their plans (layers, 400.00 MiB "
                               "planned); 4.00 MiB sent in 2 streams to 2 hosts (1 cut short, 0 failed); "
                               "5.50 s"});
  EXPECT_TRUE(Lines([&] { loads_.EndQuiet(); }).empty()) << "ended once";
  EXPECT_EQ(Lines([&] { loads_.StreamOpened("big", "10.0.0.9"); }),
            std::vector<std::string>{"load begun: model big, a stream to 10.0.0.9"})
      << "a later stream is a new load";
}

TEST_F(LoadLogTest, ADaemonThatOnlyPlansOrOnlyServesSaysSo) {
  Lines([&] {
    loads_.PlanAnswered(Plan(0));
    loads_.StreamOpened("small", "10.0.0.7");
    loads_.StreamEnded({"small", "10.0.0.7", "/m/small/a.safetensors", 512, 512});
  });
  now_ += absl::Seconds(2);
  std::vector<std::string> ended = Lines([&] { loads_.EndQuiet(); });
  std::sort(ended.begin(), ended.end());
  EXPECT_EQ(ended,
            (std::vector<std::string>{
                "load ended: model big, 1 of 4 ranks asked their plans (layers, 400.00 MiB planned); "
                "nothing streamed from here; 0.00 s",
                "load ended: model small, no plan asked here; 512 B sent in 1 stream to 1 host; 0.00 s"}));
}

TEST_F(LoadLogTest, AFloodOfStreamsCutShortIsOneLinePerTenSecondsWithTheCount) {
  std::vector<std::string> lines = Lines([&] {
    loads_.StreamOpened("big", "10.0.0.7");
    for (int i = 0; i < 64; ++i) {
      loads_.StreamEnded({"big", "10.0.0.7", "/m/big/a.safetensors", 0, 1 << 20, StreamEnd::kCancelled});
    }
    loads_.StreamEnded({"big", "10.0.0.7", "/m/big/a.safetensors", 0, 1 << 20, StreamEnd::kFailed, "EIO"});
    now_ += absl::Seconds(10);
    loads_.StreamEnded({"big", "10.0.0.7", "/m/big/a.safetensors", 0, 1 << 20, StreamEnd::kCancelled});
  });
  ASSERT_EQ(lines.size(), 4u) << "begun, the first cut, the failure, the 10 s later cut";
  EXPECT_EQ(lines[2],
            "stream failed: model big, 0 B of 1.00 MiB of \"/m/big/a.safetensors\" sent to 10.0.0.7: EIO");
  EXPECT_TRUE(absl::EndsWith(lines[3], "(and 63 more streams cut short since the last such line)"))
      << lines[3];
}

TEST_F(LoadLogTest, AStoppingDaemonEndsEveryLoadStillOpen) {
  Lines([&] {
    loads_.PlanAnswered(Plan(0));
    loads_.StreamOpened("big", "10.0.0.7");
  });
  now_ += absl::Milliseconds(250);
  EXPECT_EQ(
      Lines([&] { loads_.EndAll(); }),
      std::vector<std::string>{"load ended: model big, 1 of 4 ranks asked their plans (layers, 400.00 MiB "
                               "planned); 0 B sent in 1 stream to 1 host; 0.00 s"})
      << "a stream still in flight ends with the daemon";
  EXPECT_TRUE(Lines([&] { loads_.EndAll(); }).empty());
}

TEST_F(LoadLogTest, ANewWorldCountsItsOwnRanks) {
  Lines([&] {
    loads_.PlanAnswered(Plan(0));
    loads_.PlanAnswered(Plan(1));
    loads_.PlanAnswered(PlanAsked{"big", 2, 1, "layers", [] { return uint64_t{1000}; }, "10.0.0.7"});
    loads_.PlanAnswered(
        PlanAsked{"big", 2, 7, "layers", [] { return uint64_t{1000}; }, "10.0.0.7"});  // no such rank
  });
  now_ += absl::Seconds(3);
  EXPECT_EQ(Lines([&] { loads_.EndQuiet(); }),
            std::vector<std::string>{
                "load ended: model big, 1 of 2 ranks asked their plans (layers, 1000 B planned); "
                "nothing streamed from here; 0.00 s"});
}

}  // namespace
}  // namespace metaload
