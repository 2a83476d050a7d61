// ValidateRangeRequest, then CheckRunsInFile (daemon/serving/read_range/range_request.h): a ReadRange's four
// numbers and the file's size, taken from the input's first 40 bytes (little-endian; missing bytes are 0).
// Besides crashes and UB (checked arithmetic), it checks the promise the streaming code relies on: accepted
// runs lie inside the file and total exactly the requested length; a refusal is InvalidArgument or
// OutOfRange.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "daemon/serving/read_range/range_request.h"

namespace {

uint64_t Take(const uint8_t*& data, size_t& size) {
  uint64_t value = 0;
  const size_t n = size < 8 ? size : 8;
  std::memcpy(&value, data, n);
  data += n;
  size -= n;
  return value;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  metaload::RangeRequest request;
  request.offset = Take(data, size);
  request.length = Take(data, size);
  request.run_bytes = Take(data, size);
  request.stride_bytes = Take(data, size);
  const uint64_t file_size = Take(data, size);
  absl::StatusOr<metaload::StridedRuns> runs = metaload::ValidateRangeRequest(request, "/m/f");
  absl::Status inside =
      runs.ok() ? metaload::CheckRunsInFile(request, *runs, "/m/f", file_size) : runs.status();
  if (!inside.ok()) {
    const absl::StatusCode code = inside.code();
    if (code != absl::StatusCode::kInvalidArgument && code != absl::StatusCode::kOutOfRange) std::abort();
    return 0;
  }
  if (runs->run_count == 0) {
    if (request.length != 0) std::abort();
    return 0;
  }
  // total_bytes() == length, without overflow, and the last run ends inside the file.
  unsigned __int128 total = static_cast<unsigned __int128>(runs->run_bytes) * runs->run_count;
  if (total != request.length) std::abort();
  unsigned __int128 end = static_cast<unsigned __int128>(runs->first_offset) +
                          static_cast<unsigned __int128>(runs->run_count - 1) * runs->stride_bytes +
                          runs->run_bytes;
  if (end > file_size || runs->stride_bytes < runs->run_bytes) std::abort();
  return 0;
}
