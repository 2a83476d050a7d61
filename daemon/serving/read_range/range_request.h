// The numbers of a ReadRange request, checked against the file before a byte is read: apart
// from range_writer.h (protobuf, gRPC, the serving stack) so that its fuzz target
// (fuzz/range_request_fuzz.cc) and tests need only util/.
#ifndef METALOAD_DAEMON_SERVING_READ_RANGE_RANGE_REQUEST_H_
#define METALOAD_DAEMON_SERVING_READ_RANGE_RANGE_REQUEST_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "util/strided_runs.h"

namespace metaload {

// ReadRangeRequest's offset, length, run_bytes and stride_bytes, as sent: untrusted.
struct RangeRequest {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t run_bytes = 0;     // 0: contiguous
  uint64_t stride_bytes = 0;  // strided only: >= run_bytes
};

// The runs `request` asks for: every product and sum is checked. InvalidArgument for a strided
// request whose length is not whole runs, whose stride is below its run, or whose runs are tiny
// and far apart (runs under kSmallRunBytes that ReadRuns would not gather, util/fs/file_io.h: no
// tensor slice looks like that, and each would cost a system call per few bytes); OutOfRange
// when the last byte would lie past 2^64. On success the runs total exactly `request.length`
// bytes and their end is representable. `path` names the file in errors.
absl::StatusOr<StridedRuns> ValidateRangeRequest(const RangeRequest& request, const std::string& path);

// OutOfRange when a byte of `runs` (from ValidateRangeRequest) lies past the file's end.
absl::Status CheckRunsInFile(const RangeRequest& request, const StridedRuns& runs, const std::string& path,
                             uint64_t file_size_bytes);

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVING_READ_RANGE_RANGE_REQUEST_H_
