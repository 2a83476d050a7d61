// ValidateRangeRequest and CheckRunsInFile (daemon/serving/read_range/range_request.h), the arithmetic
// every ReadRange passes before a byte is read; fuzz/range_request_fuzz.cc checks the same promises on random
// input.
#include "daemon/serving/read_range/range_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace metaload {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kFile = 1 << 20;
constexpr uint64_t kMax = ~uint64_t{0};

// Both checks, as RangeWriter runs them.
absl::StatusOr<StridedRuns> Validate(const RangeRequest& request, const std::string& path,
                                     uint64_t file_bytes) {
  absl::StatusOr<StridedRuns> runs = ValidateRangeRequest(request, path);
  if (!runs.ok()) return runs;
  if (absl::Status inside = CheckRunsInFile(request, *runs, path, file_bytes); !inside.ok()) return inside;
  return runs;
}

TEST(ValidateRangeRequest, ContiguousAndStridedRangesInsideTheFile) {
  auto runs = Validate(RangeRequest{8, 1024, 0, 0}, "/m/f", kFile);
  ASSERT_TRUE(runs.ok()) << runs.status();
  EXPECT_EQ(*runs, (StridedRuns{8, 1024, 1024, 1}));
  runs = Validate(RangeRequest{8, 4 * 4096, 4096, 16384}, "/m/f", kFile);
  ASSERT_TRUE(runs.ok()) << runs.status();
  EXPECT_EQ(*runs, (StridedRuns{8, 4096, 16384, 4}));
  runs = Validate(RangeRequest{kFile, 0, 0, 0}, "/m/f", kFile);  // empty, at the end
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(runs->run_count, 0u);
}

TEST(ValidateRangeRequest, TheWorstValuesAreRefusedWithoutOverflow) {
  struct Case {
    RangeRequest request;
    absl::StatusCode code;
    const char* message;
  };
  for (const Case& c : {
           Case{{kMax, 1, 0, 0},
                absl::StatusCode::kOutOfRange,
                "range [18446744073709551615, +1) of /m/f ends past 2^64"},
           Case{{1, kMax, 0, 0}, absl::StatusCode::kOutOfRange, "ends past 2^64 bytes"},
           Case{{1, kMax - 1, 0, 0}, absl::StatusCode::kOutOfRange, "passes the end of /m/f (1048576 bytes)"},
           Case{{kFile - 1, 2, 0, 0}, absl::StatusCode::kOutOfRange, "passes the end"},
           Case{{0, kMax - kMax % 4096, 4096, kMax},
                absl::StatusCode::kOutOfRange,
                "strided) of /m/f ends past 2^64"},
           Case{{0, 4096 * 3, 4096, 4095}, absl::StatusCode::kInvalidArgument, "at least run_bytes"},
           Case{{0, 4097, 4096, 8192}, absl::StatusCode::kInvalidArgument, "must be a multiple of run_bytes"},
           Case{{0, 64, 16, 1 << 20}, absl::StatusCode::kInvalidArgument, "runs under 4096 bytes must lie"},
       }) {
    auto runs = Validate(c.request, "/m/f", kFile);
    ASSERT_FALSE(runs.ok()) << c.message;
    EXPECT_EQ(runs.status().code(), c.code) << c.message;
    EXPECT_THAT(std::string(runs.status().message()), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace metaload
