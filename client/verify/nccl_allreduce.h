// One NCCL all-reduce (a sum of bytes, or of 64-bit integers) among CUDA ranks, for verification. Compiled
// against the CUDA toolkit's NCCL when it is found; otherwise every call returns Unimplemented. Kept apart
// from verify.cc so NCCL/CUDA headers stay out of the LibTorch translation units.
//
// ncclCommInitRank waits, with no timeout, for every rank: so a rank first checks that it can
// take part (NcclCheckDevice) and tells its peers through the rendezvous store, and only when
// every rank can do they all call NcclSumBytes (client/verify/verify.cc).
#ifndef METALOAD_CLIENT_VERIFY_NCCL_ALLREDUCE_H_
#define METALOAD_CLIENT_VERIFY_NCCL_ALLREDUCE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace metaload {

// OK when a CUDA device `device_index` is visible and selectable; FailedPrecondition otherwise
// (no GPU or no driver), Unimplemented without NCCL.
absl::Status NcclCheckDevice(int device_index);

// `publish`/`fetch` exchange the NCCL unique id through the rendezvous store (fetch blocks
// until the key exists, or fails). `data` is summed in place across ranks on `device_index`.
absl::Status NcclSumBytes(absl::Span<uint8_t> data, int rank, int world_size, int device_index,
                          const std::function<absl::Status(const std::string&, const std::string&)>& publish,
                          const std::function<absl::StatusOr<std::string>(const std::string&)>& fetch);
// The same, as 64-bit integers (the proofs' table, client/verify/exchange.h).
absl::Status NcclSumInt64(absl::Span<int64_t> data, int rank, int world_size, int device_index,
                          const std::function<absl::Status(const std::string&, const std::string&)>& publish,
                          const std::function<absl::StatusOr<std::string>(const std::string&)>& fetch);

}  // namespace metaload

#endif  // METALOAD_CLIENT_VERIFY_NCCL_ALLREDUCE_H_
