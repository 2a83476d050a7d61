#include "daemon/serving/read_range/range_request.h"

#include "absl/strings/str_cat.h"
#include "util/fs/file_io.h"
#include "util/units.h"

namespace metaload {

absl::StatusOr<StridedRuns> ValidateRangeRequest(const RangeRequest& request, const std::string& path) {
  StridedRuns runs;
  runs.first_offset = request.offset;
  if (request.run_bytes == 0) {
    runs.run_bytes = runs.stride_bytes = request.length;
    runs.run_count = request.length == 0 ? 0 : 1;
  } else {
    if (request.stride_bytes < request.run_bytes || request.length % request.run_bytes != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "strided read of ", path, ": length ", request.length, " must be a multiple of run_bytes ",
          request.run_bytes, ", and stride_bytes ", request.stride_bytes, " at least run_bytes"));
    }
    runs.run_bytes = request.run_bytes;
    runs.stride_bytes = request.stride_bytes;
    runs.run_count = request.length / request.run_bytes;
    if (runs.run_bytes < kSmallRunBytes && runs.run_count > 1 && !GathersRuns(runs)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "strided read of ", path, ": runs of ", runs.run_bytes, " bytes every ", runs.stride_bytes,
          " bytes; runs under ", kSmallRunBytes, " bytes must lie at most ", kMaxGatherStrideBytes,
          " bytes or ", kMaxGatherStrideRatio, " runs apart (a tensor slice always does)"));
    }
  }
  uint64_t span = 0, end = 0;
  if (runs.run_count > 0 &&
      (MulOverflows(runs.run_count - 1, runs.stride_bytes, &span) ||
       AddOverflows(span, runs.run_bytes, &span) || AddOverflows(runs.first_offset, span, &end))) {
    return absl::OutOfRangeError(absl::StrCat("range [", request.offset, ", +", request.length,
                                              request.run_bytes == 0 ? "" : " strided", ") of ", path,
                                              " ends past 2^64 bytes"));
  }
  return runs;
}

absl::Status CheckRunsInFile(const RangeRequest& request, const StridedRuns& runs, const std::string& path,
                             uint64_t file_size_bytes) {
  if (runs.run_count == 0) return absl::OkStatus();
  // ValidateRangeRequest checked that none of this overflows.
  const uint64_t end = runs.first_offset + runs.span_bytes();
  if (end > file_size_bytes) {
    return absl::OutOfRangeError(absl::StrCat(
        "range [", request.offset, ", +", request.length, request.run_bytes == 0 ? "" : " strided",
        ") passes the end of ", path, " (", file_size_bytes, " bytes)"));
  }
  return absl::OkStatus();
}

}  // namespace metaload
